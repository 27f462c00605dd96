"""The one ``format_count`` and the one ``save_figure`` (every caller uses these)."""
import pytest

from mlplab.utils.figures import save_figure
from mlplab.utils.units import format_count


@pytest.mark.parametrize("n, text", [
    (None, "-"), (0, "0"), (12.5, "12.5"), (999, "999"), (12345, "12.3k"), (999_600, "1M"),
    (1_234_567, "1.23M"), (59_880_472, "59.9M"), (4.6e6, "4.6M"), (2.5e9, "2.5G"), (1e13, "10T"), (-2048, "-2.05k"),
])
def test_format_count(n, text):
    assert format_count(n) == text


def test_save_figure_writes_png_and_pdf_atomically(tmp_path):
    from matplotlib.figure import Figure  # no canvas and no pyplot: save_figure attaches Agg

    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0])
    written = save_figure(fig, tmp_path / "sub" / "fig6.png")  # a suffix in formats is dropped first
    assert written == [tmp_path / "sub" / "fig6.png", tmp_path / "sub" / "fig6.pdf"]
    assert written[0].read_bytes()[:4] == b"\x89PNG" and written[1].read_bytes()[:4] == b"%PDF"
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["fig6.pdf", "fig6.png"]  # no temp files
