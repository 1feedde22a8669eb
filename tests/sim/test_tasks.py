"""The device task both servers run: exact times of its messages with fixed costs."""

from __future__ import annotations

import simpy

from simfl.sim.links import LinkSharing
from simfl.sim.tasks import Message, MessageLog, TaskPlan, comm_rows, device_task
from tests.sim.test_server import paths


def test_a_task_downloads_computes_and_uploads_at_exact_times() -> None:
    # device 0: 1000 B down at 1000 B/s (1 s), 2 s compute, 500 B up at 250 B/s (2 s);
    # device 1 starts with it and only uploads: 400 B at 100 B/s (4 s)
    env = simpy.Environment()
    log = MessageLog(env, LinkSharing(env, paths([1000, 1000], [250, 100])))
    env.process(device_task(log, 0, TaskPlan(1000, "model", 2.0, 500, "update")))
    env.process(device_task(log, 1, TaskPlan(0, "model", 0.0, 400, "loss")))
    env.run()
    assert log.messages == [Message(0, "down", "model", 1000, 0.0, 1.0),
                            Message(1, "up", "loss", 400, 0.0, 4.0),
                            Message(0, "up", "update", 500, 3.0, 5.0)]
    assert (log.bytes("down"), log.bytes("up")) == (1000, 900)
    rows = comm_rows(7, log.messages)
    assert rows.round == 7 and rows.client_idx.tolist() == [0, 1, 0]
    assert rows.t_end_s.tolist() == [1.0, 4.0, 5.0] and rows.kind == ["model", "loss", "update"]
