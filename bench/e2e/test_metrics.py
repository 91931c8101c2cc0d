#!/usr/bin/env python3
"""Checks bench/e2e/run's metrics against hand-computed cases: Jain's index,
the nearest-rank percentile, the convergence time, the queue summary, the
tenants' shares, the deadlines' plan and verdicts, the coflow trace's
scaling onto the testbed (coflow_trace.py), and the Spark experiment's
reading of Spark's event log (spark.py).
No root, no network: `python3 bench/e2e/test_metrics.py` (smoke.sh runs it)."""
import importlib.machinery
import importlib.util
import os
import sys
import unittest

_path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run")
_loader = importlib.machinery.SourceFileLoader("e2e_run", _path)
_spec = importlib.util.spec_from_loader("e2e_run", _loader)
run = importlib.util.module_from_spec(_spec)
_loader.exec_module(run)


class Jain(unittest.TestCase):
    def test_equal_shares_score_one(self):
        self.assertAlmostEqual(run.jain([3.0, 3.0, 3.0, 3.0]), 1.0)

    def test_one_sender_taking_everything_scores_one_over_n(self):
        self.assertAlmostEqual(run.jain([8.0, 0, 0, 0]), 0.25)

    def test_two_to_one_split(self):
        # (2 + 1)^2 / (2 * (4 + 1)) = 0.9
        self.assertAlmostEqual(run.jain([2.0, 1.0]), 0.9)


class Percentile(unittest.TestCase):
    def test_nearest_rank_on_one_to_hundred(self):
        xs = list(range(100, 0, -1))
        self.assertEqual(run.pct(xs, 50), 50)
        self.assertEqual(run.pct(xs, 90), 90)
        self.assertEqual(run.pct(xs, 99), 99)
        self.assertEqual(run.pct(xs, 100), 100)

    def test_twenty_runs_p95_is_the_nineteenth(self):
        self.assertEqual(run.pct(list(range(1, 21)), 95), 19)


class Convergence(unittest.TestCase):
    def test_step_into_band_counts_from_the_event(self):
        # Given: the event at bin 0, a flow far off until bin 5, then fair.
        s = [0.0] * 5 + [100.0] * 15
        # Expect: the first all-in-band window of one bin is bin 5, so 60 ms.
        self.assertEqual(run.converge_ms([s], 100.0, 0, 20, 1, 10), 60)

    def test_smoothing_window_must_lie_after_the_event(self):
        s = [100.0] * 20
        # Already fair, but the first 3-bin window ends at bin 2: 30 ms.
        self.assertEqual(run.converge_ms([s], 100.0, 0, 20, 3, 10), 30)

    def test_leaving_the_band_later_resets(self):
        s = [100.0] * 10 + [50.0] + [100.0] * 9
        # In band again from bin 11, whose end is 120 ms after the event.
        self.assertEqual(run.converge_ms([s], 100.0, 0, 20, 1, 10), 120)

    def test_every_flow_must_be_in_band(self):
        a = [100.0] * 20
        b = [80.0] * 15 + [95.0] * 5
        self.assertEqual(run.converge_ms([a, b], 100.0, 0, 20, 1, 10), 160)

    def test_never_in_band_is_none(self):
        self.assertIsNone(run.converge_ms([[50.0] * 20], 100.0, 0, 20, 1, 10))

    def test_band_edge_is_inside(self):
        self.assertEqual(run.converge_ms([[110.0] * 4], 100.0, 0, 4, 1, 10), 10)


class QueueSummary(unittest.TestCase):
    def test_drops_and_percentiles_pool_rounds(self):
        qs = [{"sent_pkts": 90, "dropped_pkts": 10, "backlog_bytes": [0, 1000]},
              {"sent_pkts": 100, "dropped_pkts": 0, "backlog_bytes": [2000, 3000]}]
        out = run.queue_summary(qs, [1.0, 2.0, 3.0], 1e9)
        self.assertAlmostEqual(out["drop_fraction"], 10 / 200)
        self.assertEqual(out["queue_p99_bytes"], 3000)
        self.assertEqual(out["queue_p50_bytes"], 1000)
        self.assertAlmostEqual(out["queue_p99_ms"], 3000 * 8 / 1e9 * 1000)
        self.assertEqual(out["ping_p99_ms"], 3.0)


class TenantShares(unittest.TestCase):
    def test_even_split_is_inside_the_band(self):
        out = run.tenant_shares([50.0, 49.0], [50.0, 51.0], 100.0)
        self.assertAlmostEqual(out["tenant_share_a"], 99 / 200)
        self.assertAlmostEqual(out["tenant_share_b"], 101 / 200)
        self.assertEqual(out["bins_within_band"], 1.0)
        self.assertAlmostEqual(out["goodput_fraction"], 1.0)

    def test_band_is_five_percent_of_half(self):
        # 0.476 is in, 0.47 out (the edge, 0.475, falls outside in floating
        # point: a bin must be clearly inside); an empty bin is out.
        out = run.tenant_shares([47.6, 47.0, 0.0], [52.4, 53.0, 0.0], 100.0)
        self.assertAlmostEqual(out["bins_within_band"], 1 / 3)
        self.assertAlmostEqual(out["goodput_fraction"], 200 / 300)

    def test_sixteen_to_one_by_count(self):
        out = run.tenant_shares([10.0] * 4, [160.0] * 4, 200.0)
        self.assertAlmostEqual(out["tenant_share_a"], 1 / 17)
        self.assertEqual(out["bins_within_band"], 0.0)


class Deadlines(unittest.TestCase):
    def test_plan_sizes_meet_the_need_in_the_deadline(self):
        import random
        plan = run.deadline_plan(random.Random(1), 8, 0.4, 2.0, 1e9)
        self.assertEqual(len(plan), 8)
        starts = [p["start"] for p in plan]
        self.assertEqual(starts, sorted(starts))
        for p in plan:
            self.assertTrue(50 <= p["deadline_ms"] <= 250)
            self.assertTrue(0.05 <= p["need_fraction"] <= 0.4)
            rate = p["bytes"] * 8 / (p["deadline_ms"] / 1000)
            self.assertAlmostEqual(rate / 1e9, p["need_fraction"], places=4)

    def test_met_only_when_complete_within_the_deadline(self):
        plan = [{"bytes": 1, "deadline_ms": 100, "need_fraction": 0.1}] * 3
        transfers = [{"sender": 100, "complete": True, "start_s": 1.0, "finish_s": 1.0999},
                     {"sender": 101, "complete": True, "start_s": 1.0, "finish_s": 1.1001},
                     {"sender": 102, "complete": False, "start_s": 1.0, "finish_s": 1.01}]
        got = run.deadlines_met(plan, transfers)
        self.assertEqual([t["met"] for t in got], [True, False, False])
        self.assertIsNone(got[2]["fct_s"])


TRACE = """4 3
1 0 2 0 1 1 2:4
2 1000 1 3 2 3:1 0:2
3 2000 1 1 1 1:8
"""


class CoflowTrace(unittest.TestCase):
    def setUp(self):
        self.ports, self.coflows = run.coflow_trace.parse(TRACE)

    def test_parse_and_bad_lines(self):
        self.assertEqual(self.ports, 4)
        self.assertEqual(self.coflows[1]["reducers"], [(3, 1 * run.coflow_trace.MIB),
                                                        (0, 2 * run.coflow_trace.MIB)])
        for bad in ("4 1\n1 0 1 9 1 0:1\n", "4 2\n1 0 1 0 1 1:1\n", "4 1\n1 0 2 0 1 1:1\n", "x\n"):
            with self.assertRaises(ValueError):
                run.coflow_trace.parse(bad)

    def test_hosts_blocks_and_load(self):
        # 2 hosts: ports 0, 2 -> h1; 1, 3 -> h2. Coflow 1: mappers 0 (h1), 1
        # (h2), a reducer on 2 (h1) with 4 MB: only h2 -> h1 crosses, 2 MB.
        # Coflow 3: 1 -> 1, all on h2: left out.
        staged, left_out, scale = run.coflow_trace.plan(self.coflows, 2, 1e8, 0.5)
        self.assertEqual(left_out, 1)
        self.assertEqual([c["id"] for c in staged], [1, 2])
        self.assertEqual(set(staged[0]["blocks"]), {(2, 1)})
        # Coflow 2: mapper 3 (h2) to reducers 3 (h2, local) and 0 (h1).
        self.assertEqual(set(staged[1]["blocks"]), {(2, 1)})
        # Sizes keep their order and the size map; arrivals give the load.
        k = run.coflow_trace.scaled_bytes(4 * run.coflow_trace.MIB) / (4 * run.coflow_trace.MIB)
        self.assertAlmostEqual(staged[0]["blocks"][(2, 1)], round(2 * run.coflow_trace.MIB * k), delta=1)
        fabric = sum(sum(c["blocks"].values()) for c in staged)
        self.assertAlmostEqual(8 * fabric / (2 * 1e8 * staged[1]["arrival_s"]), 0.5, places=6)
        self.assertAlmostEqual(staged[1]["arrival_s"], 1.0 * scale)

    def test_plans_outputs_and_completion(self):
        staged, _, _ = run.coflow_trace.plan(self.coflows, 2, 1e8, 0.5)
        plans = run.coflow_trace.reducer_plans(staged, 2, lambda h: "10.0.0.%d" % h, 7100)
        self.assertEqual(plans[2], [])
        self.assertEqual(len(plans[1]), 2)
        self.assertTrue(plans[1][0].startswith("0.000 0 1 1 10.0.0.2:7100:0-0"))
        outs = run.coflow_trace.map_outputs(staged, 2)
        self.assertEqual([s for s, _ in outs[2]], [0, 1])
        self.assertEqual(outs[2][0][1][1], staged[0]["blocks"][(2, 1)])
        fetch = [{"shuffle": 0, "partition": 1, "finish_s": 0.5, "failed": 0,
                  "bytes": staged[0]["blocks"][(2, 1)]},
                 {"shuffle": 1, "partition": 1, "finish_s": 9.0, "failed": 0, "bytes": 1}]
        cct = run.coflow_trace.ccts(staged, fetch)
        self.assertAlmostEqual(cct[0], 0.5)
        self.assertIsNone(cct[1])  # bytes missing: not complete
        s = run.coflow_trace.summarize(staged, cct, run.pct, censor_s=10.0)
        self.assertEqual(s["incomplete"], 1)
        self.assertAlmostEqual(s["cct_mean_s"], (0.5 + 10.0 - staged[1]["arrival_s"]) / 2)


    def test_sim_trace_keeps_each_reducers_bytes_and_arrival(self):
        # Coflow 1 on 3 hosts: h1 and h2 map, h1 and h3 reduce; h1 -> h1
        # is local, so h1 receives only from h2.
        staged = [{"id": 7, "arrival_s": 0.25, "blocks": {(2, 1): 300, (1, 3): 100, (2, 3): 100}},
                  {"id": 9, "arrival_s": 1.5, "blocks": {(3, 2): 50}}]
        text = run.coflow_trace.sim_trace(staged, 3)
        rows = [l.split() for l in text.splitlines()]
        self.assertEqual(rows[0], ["3", "2"])
        self.assertEqual((rows[1][0], float(rows[1][1])), ("7", 250.0))
        m = int(rows[1][2])
        mappers = [int(x) + 1 for x in rows[1][3:3 + m]]
        self.assertEqual(mappers, [1, 2])
        # What the simulator moves: a reducer's bytes split evenly over the
        # mappers, the share of a mapper on the reducer's own host left out.
        got = {}
        for tok in rows[1][4 + m:]:
            r, mb = tok.split(":")
            got[int(r) + 1] = sum(float(mb) * run.coflow_trace.MIB / m
                                  for hm in mappers if hm != int(r) + 1)
        self.assertAlmostEqual(got[1], 300, places=3)
        self.assertAlmostEqual(got[3], 200, places=3)
        self.assertEqual(rows[2][:5], ["9", "1500.000", "1", "2", "1"])

    def test_shipped_ordering_trace_puts_the_small_coflows_inside_the_large(self):
        # bench/e2e/traces/one-large-five-small.txt: the five small coflows
        # must arrive while the large one still runs on h1's downlink (alone
        # at the link rate it needs its bytes / rate), or the trace would
        # not test ordering at all.
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traces",
                            "one-large-five-small.txt")
        with open(path) as f:
            _, coflows = run.coflow_trace.parse(f.read())
        staged, left_out, _ = run.coflow_trace.plan(coflows, 8, 1e8, 0.54)
        self.assertEqual((len(staged), left_out), (6, 0))
        large = staged[0]
        self.assertEqual({r for _, r in large["blocks"]}, {1})
        alone_s = 8 * sum(large["blocks"].values()) / 1e8
        for c in staged[1:]:
            self.assertEqual({r for _, r in c["blocks"]}, {1})
            self.assertLess(c["arrival_s"], 0.5 * alone_s)
            self.assertLess(sum(c["blocks"].values()), sum(large["blocks"].values()) / 50)

    def test_fluid_reference_uses_the_allocators_default_share(self):
        with open(os.path.join(os.path.dirname(_path), "..", "..", "allocator", "daemon", "include",
                               "flowtune", "daemon", "allocator.h")) as f:
            self.assertIn("double coflow_share = %s;" % run.ALLOCATOR_COFLOW_SHARE, f.read())


def _spark_events():
    """An event log of two jobs: job 0 shuffles 3 MB (stage 0 writes,
    stage 1 reads 2 MB remote, one task failed once), job 1 a few bytes."""
    def task(stage, write=0, remote=0, local=0, wait_ms=0, reason="Success"):
        return {"Event": "SparkListenerTaskEnd", "Stage ID": stage,
                "Task End Reason": {"Reason": reason},
                "Task Metrics": {"Shuffle Write Metrics": {"Shuffle Bytes Written": write},
                                 "Shuffle Read Metrics": {"Remote Bytes Read": remote,
                                                          "Local Bytes Read": local,
                                                          "Fetch Wait Time": wait_ms}}}

    def done(stage, submit_ms, complete_ms):
        return {"Event": "SparkListenerStageCompleted",
                "Stage Info": {"Stage ID": stage, "Submission Time": submit_ms,
                               "Completion Time": complete_ms}}
    return [
        {"Event": "SparkListenerJobStart", "Job ID": 0, "Stage IDs": [0, 1]},
        task(0, write=1_500_000), task(0, write=1_500_000), done(0, 10_000, 14_000),
        task(1, remote=1_000_000, local=500_000, wait_ms=300),
        task(1, remote=1_000_000, local=500_000, wait_ms=200, reason="FetchFailed"),
        task(1, remote=0, local=0), done(1, 14_100, 16_600),
        {"Event": "SparkListenerJobStart", "Job ID": 1, "Stage IDs": [2, 3]},
        task(2, write=100), done(2, 17_000, 18_000), task(3, remote=60), done(3, 18_000, 18_100),
    ]


class SparkEventLog(unittest.TestCase):
    def check(self, path):
        st = run.spark.event_log_stages(path)
        self.assertEqual(st[1]["job"], 0)
        self.assertEqual(st[1]["tasks"], 3)
        self.assertEqual(st[1]["failed"], 1)
        sh = run.spark.shuffle_of(st)
        self.assertEqual(sh["shuffle_bytes"], 3_000_000)  # job 0, not job 1
        self.assertEqual(sh["remote_bytes"], 2_000_000)
        self.assertEqual(sh["local_bytes"], 1_000_000)
        self.assertAlmostEqual(sh["map_stage_s"], 4.0)
        self.assertAlmostEqual(sh["shuffle_stage_s"], 2.5)
        self.assertAlmostEqual(sh["job_s"], 6.6)
        self.assertAlmostEqual(sh["fetch_wait_s"], 0.5)
        self.assertEqual(sh["failed_tasks"], 1)

    def test_a_plain_log_and_a_rolling_one_read_alike(self):
        import json
        import tempfile
        lines = [json.dumps(e) for e in _spark_events()]
        with tempfile.TemporaryDirectory() as d:
            plain = os.path.join(d, "app-1")
            with open(plain, "w") as f:
                f.write("\n".join(lines + ["{truncated"]) + "\n")
            self.check(plain)
            # A rolling log: events_N_APP files beside a status file.
            rolling = os.path.join(d, "eventlog_v2_app-1")
            os.mkdir(rolling)
            cut = [0, 3, 7, len(lines)]
            for i, n in enumerate((1, 2, 10)):
                with open(os.path.join(rolling, "events_%d_app-1" % n), "w") as f:
                    f.write("\n".join(lines[cut[i]:cut[i + 1]]) + "\n")
            with open(os.path.join(rolling, "appstatus_app-1"), "w") as f:
                f.write("not events")
            self.check(rolling)

    def test_no_shuffle_is_none(self):
        self.assertIsNone(run.spark.shuffle_of({}))
        st = {0: dict(run.spark._stage(), job=0, duration_s=1.0, submit_s=0, complete_s=1)}
        self.assertIsNone(run.spark.shuffle_of(st))

    def test_a_failed_job_and_the_allocators_deltas(self):
        ok = {"exit": 0, "answer": {"totals_match": True}, "shuffle_stage_s": 2.0, "wall_s": 9}
        bad = {"exit": 0, "answer": {"totals_match": False}, "shuffle_stage_s": 4.0, "wall_s": 9}
        lost = {"exit": 1, "answer": None, "wall_s": 600}
        s = run.spark_summary([ok, bad, lost])
        self.assertEqual(s["failed_jobs"], 2)
        self.assertAlmostEqual(s["shuffle_stage_s"], 3.0)  # rounds without a figure are left out
        before = {"counters": {"hellos": 1, "starts": 10, "ends": 9}, "policy": {"coflow_plans": 2}}
        after = {"counters": {"hellos": 4, "starts": 110, "ends": 109}, "policy": {"coflow_plans": 7}}
        self.assertEqual(run.allocator_seen(before, after),
                         {"hellos": 3, "starts": 100, "ends": 100, "coflow_plans": 5})
        self.assertIsNone(run.allocator_seen(None, after))

    def test_two_jobs_make_one_round(self):
        small = {"exit": 0, "rows": 10, "answer": {"fingerprint": "aa", "totals_match": True},
                 "shuffle_stage_s": 2.0, "map_stage_s": 1.0, "job_s": 3.0, "fetch_wait_s": 1.5,
                 "remote_bytes": 100, "failed_tasks": 0}
        large = dict(small, rows=40, answer={"fingerprint": "bb", "totals_match": True},
                     shuffle_stage_s=6.0, remote_bytes=400, failed_tasks=1)
        m = run.spark_merge([small, large], 30.0, 12, None)
        self.assertEqual(m["exit"], 0)
        self.assertAlmostEqual(m["shuffle_stage_s"], 4.0)
        self.assertEqual(m["remote_bytes"], 500)
        self.assertEqual(m["failed_tasks"], 1)
        self.assertEqual(m["answer"], {"fingerprint": "10:aa,40:bb", "totals_match": True})
        # A job that timed out (no exit status, no answer, no figures).
        lost = {"exit": None, "rows": 40, "answer": None}
        m = run.spark_merge([small, lost], 600.0, 12, None)
        self.assertIsNone(m["exit"])
        self.assertIsNone(m["shuffle_stage_s"])  # a mean of one job would pass for the round's
        self.assertEqual(m["answer"]["fingerprint"], "10:aa")
        self.assertFalse(m["answer"]["totals_match"])
        s = run.spark_summary([run.spark_merge([small, large], 30.0, 12, None)] * 2)
        self.assertEqual(s["shuffle_stage_by_job_s"], [2.0, 6.0])
        self.assertEqual(s["failed_jobs"], 0)


_cb_loader = importlib.machinery.SourceFileLoader(
    "coflow_bound", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                 "coflow_bound.py"))
coflow_bound = importlib.util.module_from_spec(importlib.util.spec_from_loader("coflow_bound", _cb_loader))
_cb_loader.exec_module(coflow_bound)


class CoflowBound(unittest.TestCase):
    def test_srpt_preempts_for_the_shorter_job(self):
        # a runs 0-1, b (1 s) preempts it at 1 and ends at 2, a ends at 4.
        self.assertEqual(coflow_bound.srpt([(0, 3, "a"), (1, 1, "b")]), {"a": 4, "b": 2})

    def test_two_coflows_on_one_port_bound_above_isolation(self):
        # Two 1 MB coflows from rack 0 to rack 1 at once: alone each takes
        # 2^20 B / 125 MB/s; on their shared ports one must wait for the other.
        one = 2**20 / 1.25e8
        cs = coflow_bound.parse("2 2\n1 0 1 0 1 1:1.0\n2 0 1 0 1 1:1.0\n3 5 1 1 1 1:4.0\n")
        self.assertEqual(len(cs), 2)  # coflow 3 is rack-local: left out
        b = coflow_bound.bounds(cs)
        self.assertAlmostEqual(b["isolated_mean_s"], one)
        self.assertAlmostEqual(b["port_srpt_mean_s"], 1.5 * one)


class SenderArgv(unittest.TestCase):
    class Args:
        wait_rate_ms = 0

    def test_static_paces_each_connection_at_its_given_rate_without_the_shim(self):
        r = run.Runner(self.Args(), tb=None)
        argv, env = r.sender_argv("static", {"host": 2, "flows": 16, "pace_Bps": 3510937.5},
                                  ["flowtune-traffic", "send"])
        self.assertEqual(argv[-2:], ["--pace-bps", "3510937"])
        self.assertIn("cubic", argv)
        self.assertNotIn(run.FLOWTUNE_RUN, argv)
        self.assertEqual(env, {})

    def test_static_needs_a_rate(self):
        r = run.Runner(self.Args(), tb=None)
        with self.assertRaises(KeyError):
            r.sender_argv("static", {"host": 1, "flows": 1}, ["flowtune-traffic", "send"])

    def test_only_the_tenants_experiment_runs_static(self):
        self.assertEqual([e for e, ss in run.EXPERIMENT_SCHEMES.items() if "static" in ss],
                         ["tenants"])

if __name__ == "__main__":
    unittest.main(verbosity=1)
