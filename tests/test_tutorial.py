"""docs/tutorial.ipynb: committed without outputs, and run top to bottom in a real Jupyter kernel
(nbclient + ipykernel, the test extra), its own work costing under two minutes of CPU time (so it
runs in under two minutes on two quiet cores; the kernel's start and imports come on top)."""
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = REPO / "docs" / "tutorial.ipynb"
CPU_BUDGET_S = 120


def test_the_notebook_is_committed_without_outputs():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, "the tutorial has no code cells"
    for i, cell in enumerate(code):
        assert cell["outputs"] == [] and cell["execution_count"] is None, \
            f"code cell {i} of {NOTEBOOK.name} holds outputs: clear them (jupyter nbconvert --clear-output --inplace)"
        assert not cell["metadata"].get("execution"), f"code cell {i} holds execution timings: clear them"
    assert "widgets" not in nb["metadata"]


@pytest.mark.slow
def test_the_notebook_runs_top_to_bottom_in_a_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat", reason="needs the test extra (pip install -e '.[test]')")
    nbclient = pytest.importorskip("nbclient", reason="needs the test extra (pip install -e '.[test]')")
    pytest.importorskip("ipykernel", reason="needs the test extra (pip install -e '.[test]')")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import resource\nr = resource.getrusage(resource.RUSAGE_SELF)\nprint(r.ru_utime + r.ru_stime)"))
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(
        [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])}  # the run folder goes to tmp_path
    client = nbclient.NotebookClient(nb, timeout=4 * CPU_BUDGET_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute(env=env)  # a cell that raises fails here, naming the cell and the error
    images = sum("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert images == 3  # Fig. S.9, the planner's pairs, the run's curves
    cpu = float(nb.cells[-1].outputs[0]["text"])
    print(f"tutorial: {cpu:.1f} s of CPU time in the kernel")
    assert cpu < CPU_BUDGET_S, f"the tutorial took {cpu:.0f} s of CPU time; keep it under {CPU_BUDGET_S} s"
