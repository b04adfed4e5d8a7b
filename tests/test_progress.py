"""Progress lines: counts as a person reads them."""
from sepo.progress import _Task


def test_a_large_count_prints_as_an_integer_not_in_e_notation():
    task = _Task("model replies", 1_916_928)
    assert "0/1,916,928 (0%)" in task.text() and "e+" not in task.text()
    assert "time left not known yet" in task.text()
    task.completed = 3
    assert "3/1,916,928" in task.text() and "about" in task.text()
    unbounded = _Task("steps", None)
    unbounded.completed = 1_234_567
    assert "1,234,567 done" in unbounded.text()
