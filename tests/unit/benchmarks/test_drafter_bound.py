"""benchmarks/drafter_bound.py: the rows and the table from the two engines' medians (no engine)."""

from benchmarks.drafter_bound import markdown, rows_of


def test_a_draft_job_slower_than_the_verification_reads_above_one():
    rows = rows_of({"1": 0.4690, "4": 0.4951}, {"1": 0.3256, "4": 0.3595}, k=3)
    assert rows == [{"k": 3, "n": 1, "draft_job_ms": 469.0, "verify_ms": 325.6, "draft_job_over_verify": 1.44},
                    {"k": 3, "n": 4, "draft_job_ms": 495.1, "verify_ms": 359.5, "draft_job_over_verify": 1.38}]
    table = markdown(rows).splitlines()
    assert len(table) == 4 and table[2] == "| 3 | 1 | 469.0 ms | 325.6 ms | 1.44 |"
