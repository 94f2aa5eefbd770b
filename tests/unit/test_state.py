from farm.state import CHUNK_TRANSITIONS, ChunkState, JobState, can_move, sources_of


def test_done_is_terminal() -> None:
    assert CHUNK_TRANSITIONS[ChunkState.DONE] == frozenset()
    assert not any(can_move(ChunkState.DONE, s) for s in ChunkState)


def test_a_chunk_is_claimed_only_while_waiting() -> None:
    assert sources_of(ChunkState.RENDERING) == {ChunkState.QUEUED, ChunkState.INTERRUPTED}


def test_a_finished_or_failed_chunk_is_never_claimed() -> None:
    assert not can_move(ChunkState.FAILED, ChunkState.RENDERING)
    assert not can_move(ChunkState.CANCELLED, ChunkState.RENDERING)


def test_done_only_after_encoding() -> None:
    assert sources_of(ChunkState.DONE) == {ChunkState.ENCODING}


def test_every_state_has_a_docstring_and_a_row() -> None:
    assert set(CHUNK_TRANSITIONS) == set(ChunkState)


def test_final_job_states() -> None:
    assert {s for s in JobState if s.final} == {JobState.DONE, JobState.FAILED, JobState.CANCELLED}
