"""``check_compile``: a compile test in a subprocess reports success, failure and a hang."""
from mlplab.train.machine import check_compile


def test_check_compile_reports_success_failure_and_timeout():
    ok = check_compile(timeout=60, program="pass")
    assert ok["works"] and ok["reason"] is None and ok["seconds"] >= 0
    bad = check_compile(timeout=60, program="raise RuntimeError('no compiler here')")
    assert not bad["works"] and bad["reason"] == "RuntimeError: no compiler here"
    slow = check_compile(timeout=0.5, program="import time; time.sleep(30)")
    assert not slow["works"] and "0.5 s" in slow["reason"]
