"""A chart's PNG is drawn once and cropped to what it draws, as `savefig(bbox_inches="tight")`
crops it (which draws every figure twice: once only to measure it)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

from vllm_load.report import charts


def _chart(outside: bool):
    with charts.plt.rc_context(charts.STYLE):
        fig, (ax,) = charts.figure()
        ax.plot([1, 10, 100], [1_000_000, 2_500_000, 3_000_000], marker="o", label="a series")
        charts.log_level_axis(ax, [1, 10, 100])
        ax.set_ylabel("total throughput (tok/s)")
        ax.set_title("a title above the axes")
        if outside:  # a legend right of the axes, past the figure's edge
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            ax.legend()
    return fig


def _tight(fig) -> np.ndarray:
    buf = io.BytesIO()
    with charts.plt.rc_context(charts.STYLE):
        fig.savefig(buf, format="png", bbox_inches="tight")
    return np.asarray(Image.open(buf).convert("RGB"), dtype=np.int16)


@pytest.mark.parametrize("outside", [False, True])
def test_a_chart_is_drawn_once_and_holds_what_savefig_tight_holds(monkeypatch, outside):
    want = _tight(_chart(outside))
    draws = []
    real = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda fig, r: draws.append(1) or real(fig, r))
    with charts.plt.rc_context(charts.STYLE):
        png = charts.png_base64(_chart(outside))
    got = np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB"), np.int16)
    # drawn past its edge: drawn again around what it draws, as savefig does; else once
    assert len(draws) == (2 if outside else 1)
    # the same box to a pixel or two, and the same picture in it
    assert abs(got.shape[0] - want.shape[0]) <= 2 and abs(got.shape[1] - want.shape[1]) <= 2
    h, w = min(got.shape[0], want.shape[0]), min(got.shape[1], want.shape[1])
    for dy in (0, got.shape[0] - h):  # aligned at either edge, whichever the rounding favoured
        for dx in (0, got.shape[1] - w):
            diff = np.abs(got[dy : dy + h, dx : dx + w] - want[:h, :w]).mean()
            if diff < 3:
                return
    pytest.fail(f"the cropped chart differs from savefig's tight one (mean |diff| {diff:.1f})")
