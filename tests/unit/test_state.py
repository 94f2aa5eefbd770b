from farm.state import CHUNK_TRANSITIONS, ChunkState, JobState, can_move, sources_of


def test_done_is_terminal() -> None:
    assert CHUNK_TRANSITIONS[ChunkState.DONE] == frozenset()
    assert not any(can_move(ChunkState.DONE, s) for s in ChunkState)


def test_a_chunk_is_claimed_only_from_queued() -> None:
    assert sources_of(ChunkState.RENDERING) == {ChunkState.QUEUED}


def test_done_only_after_encoding() -> None:
    assert sources_of(ChunkState.DONE) == {ChunkState.ENCODING}


def test_every_state_has_a_docstring_and_a_row() -> None:
    assert set(CHUNK_TRANSITIONS) == set(ChunkState)


def test_final_job_states() -> None:
    assert {s for s in JobState if s.final} == {JobState.DONE, JobState.FAILED, JobState.CANCELLED}
