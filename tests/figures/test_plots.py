"""plots: the four figures, PNG and SVG, on the embedded MiniLM table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from qkenergy.analysis.analyze import analyze_model
from qkenergy.analysis.nullspec import NullSpec
from qkenergy.base.errors import QKEnergyError
from qkenergy.figures.plots import (
    accumulation_limit,
    choose_head,
    extreme_heads,
    normalised_spectrum,
    plot_results,
    ternary_xy,
    type_counts,
)

SAMPLES = 300


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Shared with the other modules' fixtures: the null law is drawn once per session.
    return tmp_path_factory.getbasetemp() / "qkenergy-null-cache"


@pytest.fixture(scope="module")
def table(cache: Path) -> pd.DataFrame:
    return analyze_model(samples=SAMPLES, seed=0, cache_dir=cache).heads


def test_plot_results(table: pd.DataFrame, tmp_path: Path, cache: Path) -> None:
    out = tmp_path / "figs" / "deep"
    paths = plot_results(table, out, null=NullSpec(samples=SAMPLES), cache_dir=cache)
    layer, head = choose_head(table)
    z = table["symmetric_energy_z"].abs()
    assert (layer, head) == tuple(table.loc[z.idxmax(), ["layer", "head"]])
    stems = [
        "symmetric_energy_heatmap",
        "symmetric_energy_null",
        "head_types_per_layer",
        "symmetric_profiles",
        "moments_O_E",
        "type_spectra",
        f"lobes_layer{layer}_head{head}",
    ]
    assert [p.name for p in paths] == [f"{s}.{fmt}" for s in stems for fmt in ("png", "svg")]
    for path in paths:
        data = path.read_bytes()
        assert len(data) > 5000, path
        if path.suffix == ".png":
            assert data.startswith(b"\x89PNG\r\n\x1a\n")
        else:
            assert b"<svg" in data[:2000]
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in paths)  # no temp files


def test_chosen_head_and_formats(table: pd.DataFrame, tmp_path: Path, cache: Path) -> None:
    paths = plot_results(
        table, tmp_path, head=(2, 3), null=NullSpec(samples=SAMPLES), cache_dir=cache, formats=["svg"]
    )
    assert [p.name for p in paths][-1] == "lobes_layer2_head3.svg"
    assert all(p.suffix == ".svg" for p in paths)


def test_without_null_or_lobes(table: pd.DataFrame, tmp_path: Path, cache: Path) -> None:
    df = table.drop(columns=["alpha", "beta"])
    df[[c for c in df.columns if c.endswith(("_z", "_p", "_p_bh"))]] = np.nan
    with pytest.warns(UserWarning, match="lobe figures skipped"):
        paths = plot_results(df, tmp_path, null=NullSpec(samples=SAMPLES), cache_dir=cache, formats=("png",))
    assert (
        len(paths) == 5
    )  # heatmap, null, head types per layer, profiles, O-E (no null columns needed): no spectra without lobes
    # Without z-scores the most extreme head is the farthest from the baseline.
    s = table["symmetric_energy"] - 385 / 768
    assert choose_head(df) == tuple(table.loc[s.abs().idxmax(), ["layer", "head"]])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"head": (9, 0)}, "head: layer 9, head 0 is not in the table"),
        ({"head": "2;3"}, "head: expected LAYER,HEAD"),
        ({"formats": ("jpg",)}, "plot formats"),
    ],
)
def test_errors(table: pd.DataFrame, tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(QKEnergyError, match=message):
        plot_results(table, tmp_path, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_geometry() -> None:
    limit = accumulation_limit(np.array([0.0, 0.5, 1.0, 3.0]))
    np.testing.assert_allclose(limit.sum(axis=1), 1.0)
    np.testing.assert_allclose(limit[2], [1, 0, 0])
    np.testing.assert_allclose(limit[1], np.array([1.0, 0.25, 0.0]) / 1.25)
    x, y = ternary_xy([1, 0, 0], [0, 1, 0], [0, 0, 1])
    np.testing.assert_allclose(x, [0.5, 0, 1])
    np.testing.assert_allclose(y, [np.sqrt(3) / 2, 0, 0])


def test_head_types_per_layer_counts_every_head_once(table: pd.DataFrame) -> None:
    counts = type_counts(table)
    assert list(counts.columns) == ["II", "I+", "I-"] and list(counts.index) == [str(i) for i in range(6)]
    assert (counts.sum(axis=1) == 12).all()
    for layer, row in counts.iterrows():
        types = table.loc[table["layer"] == int(layer), "head_type"]
        assert row.to_dict() == {t: int((types == t).sum()) for t in ("II", "I+", "I-")}


def test_type_spectra_average_unit_norm_spectra_of_the_most_extreme_heads(table: pd.DataFrame) -> None:
    chosen = extreme_heads(table, "I+", 3)
    others = table[(table["head_type"] == "I+") & ~table.index.isin(chosen.index)]
    assert len(chosen) == 3 and chosen["c_sym"].min() >= others["c_sym"].max()
    alpha, beta = normalised_spectrum(chosen)
    expected_alpha = np.mean(
        [
            np.asarray(a) / np.sqrt(np.sum(np.square(a)) + np.sum(np.square(b)))
            for a, b in zip(chosen["alpha"], chosen["beta"])
        ],
        axis=0,
    )
    np.testing.assert_allclose(alpha[: expected_alpha.size], expected_alpha, rtol=1e-12)
    # Each head's spectrum has unit norm, so the mean spectrum's squares sum to at most 1 (equal if all alike).
    assert 0 < np.sum(alpha**2) + np.sum(beta**2) <= 1 + 1e-12
    assert np.all(np.diff(alpha) <= 1e-12) and np.all(np.diff(beta) <= 1e-12)  # sorted lobes stay sorted
    assert len(extreme_heads(table.assign(head_type="I+"), "II")) == 0


def _inside(box, outer) -> bool:
    return box.x1 > outer.x0 and box.x0 < outer.x1 and box.y1 > outer.y0 and box.y0 < outer.y1


def test_legends_lie_off_the_data(table: pd.DataFrame) -> None:
    """The lobes, O-E and spectra figures keep their legends under the axes, where no point can be."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from qkenergy.figures.plots import figure

    for name in ("lobes", "moments_O_E", "type_spectra"):
        fig = figure(table, name, null=NullSpec(samples=SAMPLES))
        renderer = FigureCanvasAgg(fig).get_renderer()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        assert legends, name
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is not None:
                assert legend.get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0, name


def test_heatmap_tells_near_baseline_heads_apart(table: pd.DataFrame) -> None:
    """Cells print s to 3 decimals; a head 1 null sd off the baseline is coloured apart from it."""
    from qkenergy.figures.plots import figure

    fig = figure(table, "symmetric_energy_heatmap")
    ax = fig.axes[0]
    cells = [t.get_text().rstrip("*") for t in ax.texts]
    assert len(cells) == len(table) and all(len(c.split(".")[1]) == 3 for c in cells)
    assert "(N+1)/(2N)" in ax.get_title() and "/2N " not in ax.get_title()
    image = ax.images[0]
    norm, cmap = image.norm, image.cmap
    # the colours are of the distance in null sd: the baseline white, one sd visibly tinted
    assert np.allclose(cmap(norm(0.0))[:3], cmap(0.5)[:3])
    assert abs(float(norm(1.0)) - 0.5) > 0.03


def test_simplex_names_its_type_boundaries(table: pd.DataFrame) -> None:
    from qkenergy.figures.plots import figure

    labels = figure(table, "symmetric_profiles").axes[0].get_legend_handles_labels()[1]
    assert any(label.startswith("type boundaries |c − d|/(c + d) = 0.2") for label in labels)
    radius = figure(table, "symmetric_profiles", settings={"radius": 0.05})
    labels = radius.axes[0].get_legend_handles_labels()[1]
    assert "c + d = 0.05: Type II above" in labels and "c = d: I+ left, I− right" in labels
