"""Plots of the day simulation: cumulative spend against the target curve, and p."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from adfunnel.sim.day import DaySim


def plot_campaigns(sim: DaySim, out_dir: Path) -> list[Path]:
    """One PNG per campaign (``<scenario>_c<id>.png``): cumulative billed spend and the
    target (both as a share of the budget in force) over local hours, p below."""
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in campaign_figures(sim):
        path = out_dir / name
        fig.savefig(path, dpi=80)
        plt.close(fig)
        paths.append(path)
    return paths


def campaign_figures(sim: DaySim) -> Iterator[tuple[str, Figure]]:
    """(file name, figure) per campaign with control steps on the scenario's day. Every
    axis is labelled with its quantity and unit: the top panel's share of budget, the
    bottom panel's p and the local hours they share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from adfunnel.campaigns.schedule import day_bounds

    for tr in sim.tracks.values():
        c = tr.campaign
        ds, _ = day_bounds(sim.sc.day, c.time_zone)
        d0 = ds.timestamp()
        steps = [s for s in tr.steps if s[5] == sim.sc.day.toordinal()]
        if not steps:
            continue
        ev = sorted(tr.spend_events)
        xs, ys = [], []
        acc = 0
        j = 0
        tx, target, ps = [], [], []
        for t, p, _state, tgt, bud, _ in steps:
            while j < len(ev) and ev[j][0] <= t:
                if ev[j][0] >= d0:
                    acc += ev[j][1]
                j += 1
            h = (t - d0) / 3600.0
            xs.append(h)
            ys.append(acc / bud if bud else 0.0)
            tx.append(h)
            target.append(tgt / bud if bud else 0.0)
            ps.append(p)
        fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                     gridspec_kw={"height_ratios": [3, 1]})
        a1.plot(tx, target, label="target", color="grey", linestyle="--")
        a1.plot(xs, ys, label="billed spend", color="tab:blue")
        a1.set_ylabel("cumulative share of daily budget")
        a1.set_xlabel("local time (hours since midnight)")
        a1.xaxis.label.set_visible(False)  # shared with the panel below, which shows it
        a1.set_title(f"{sim.sc.name}: campaign {c.id} ({c.time_zone}, {c.bid_type.value}, "
                     f"{c.pacing_mode.value})")
        a1.legend(loc="upper left")
        a2.plot(tx, ps, color="tab:orange")
        a2.set_yscale("log")
        a2.set_ylabel("pacing p (log)")
        a2.set_xlabel("local time (hours since midnight)")
        fig.tight_layout()
        yield f"{sim.sc.name}_c{c.id}.png", fig
