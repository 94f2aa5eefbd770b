from farm.core import keys


def test_layout_is_deterministic_and_under_the_job_prefix() -> None:
    job = "j-1"
    assert keys.frame_key(job, 12, "3-4") == "jobs/j-1/frames/000012.c3-4.png"
    assert keys.segment_key(job, 3, 2) == "jobs/j-1/segments/00003-claim2.mp4"
    assert keys.manifest_key(job, 3, None) == "jobs/j-1/manifests/00003.json"
    assert keys.manifest_key(job, 3, keys.writer(3, 7)) == "jobs/j-1/manifests/00003.c3-7.json"
    assert keys.output_key(job) == "jobs/j-1/output.mp4"
    assert keys.log_key(job, 3, 2, "render", 5) == "jobs/j-1/logs/00003-render-attempt2-claim5.log"
    for key in (keys.frame_key(job, 1, "0-4"), keys.spec_key(job), keys.output_key(job)):
        assert key.startswith(keys.job_prefix(job))


def test_scenes_are_content_addressed() -> None:
    assert keys.scene_key("ab" * 32) == f"scenes/{'ab' * 32}.blend"


def test_lease_members_round_trip_with_colons_in_ids() -> None:
    member = keys.lease_member("j-2026:x", 17)
    assert keys.parse_lease_member(member) == ("j-2026:x", 17)
