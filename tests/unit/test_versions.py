from farm.core.versions import can_open, needs_text, refusal


def test_a_worker_opens_files_of_its_own_and_older_series() -> None:
    assert can_open((4, 5), (4, 5, 4))
    assert can_open((3, 4), (4, 5, 4))
    assert can_open((2, 93), (4, 5, 4))


def test_blender_4_5_opens_5_0_files() -> None:
    assert can_open((5, 0), (4, 5, 4))


def test_older_blenders_cannot_open_5_0_files() -> None:
    assert not can_open((5, 0), (4, 4, 3))
    assert not can_open((5, 0), (3, 4, 1))


def test_a_newer_series_without_a_known_reader_needs_itself() -> None:
    assert not can_open((5, 1), (4, 5, 4))
    assert can_open((5, 1), (5, 1, 0))


def test_a_4_x_file_does_not_open_in_3_4() -> None:
    assert not can_open((4, 2), (3, 4, 1))


def test_refusal_names_the_blender_needed() -> None:
    assert refusal((5, 0), [(4, 5, 4)]) is None
    assert refusal((5, 1), [(4, 5, 4), (4, 5, 4)]) == (
        "the scene was saved by Blender 5.1: needs Blender 5.1 or newer; "
        "this farm's workers run Blender 4.5.4"
    )
    assert needs_text((5, 0)) == "saved by Blender 5.0: needs Blender 4.5 or newer"


def test_without_live_workers_the_farm_release_decides() -> None:
    assert refusal((5, 0), []) is None
    assert refusal((5, 2), []) is not None
