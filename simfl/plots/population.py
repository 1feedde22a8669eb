"""A population's availability in one figure (``python -m simfl trace stats ... --figure``):
when its devices are online over the day, weekdays against weekends, and how unevenly
the online time is spread over the devices."""

from __future__ import annotations

import numpy as np
import polars as pl
import seaborn as sns
from matplotlib.figure import Figure


def plot_population(hourly: pl.DataFrame, device_share: np.ndarray, title: str) -> Figure:
    """Left: the online share by local hour of the day, on weekdays and on weekend days.
    Right: the distribution of the devices' online shares (ECDF, log scale; the devices
    never online are counted in the legend: a log axis has no 0)."""
    fig = Figure(figsize=(10.0, 4.0), layout="constrained")
    with sns.axes_style("whitegrid"):
        left, right = fig.subplots(1, 2)
    hours = hourly["hour"].to_numpy()
    for column, label in (("weekday_share", "weekdays"), ("weekend_share", "weekend")):
        left.plot(hours, hourly[column].to_numpy(), marker="o", markersize=3, label=label)
    left.set_xlabel("local hour of the day")
    left.set_ylabel("share of devices online")
    left.set_xticks(range(0, 24, 3))
    left.set_ylim(bottom=0)
    left.legend()
    never = int(np.sum(device_share <= 0))
    online = np.sort(device_share[device_share > 0])
    if online.size:
        right.step(online, np.arange(1, online.size + 1) / device_share.size, where="post",
                   label=f"{device_share.size} devices ({never} never online)")
        right.set_xscale("log")
        right.legend(loc="upper left")
    right.set_xlabel("device's online share of the window (log scale)")
    right.set_ylabel("share of devices at or below")
    right.set_ylim(0, 1)
    fig.suptitle(title)
    return fig
