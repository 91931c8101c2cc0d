#!/usr/bin/env python3
"""Checks the chaos suite's figures (bench/chaos/metrics.py) and its helpers'
parsing and pattern check (bench/chaos/agents.py) against hand-built cases.
No root, no network: `python3 bench/chaos/test_metrics.py` (bench/e2e/smoke.sh
runs it)."""
import hashlib
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents  # noqa: E402
import metrics  # noqa: E402


def s(t, **caps):
    return {"t": t, "caps": caps}


class CapsByProgram(unittest.TestCase):
    def test_sockets_map_to_programs_by_port_and_keep_the_largest_cap(self):
        m = {"iperf3": ("peer", 5201), "nginx": ("local", 8080)}
        socks = [[40000, 5201, 0.0], [40001, 5201, 2e8], [8080, 51000, 5e7], [22, 9, 1.0]]
        self.assertEqual(metrics.caps_by_program(socks, m), {"iperf3": 2e8, "nginx": 5e7})

    def test_a_program_without_sockets_is_absent(self):
        self.assertEqual(metrics.caps_by_program([], {"a": ("peer", 1)}), {})


class Times(unittest.TestCase):
    # Allocator gone at t=10.0, back at t=11.0; a and b are paced until 10.29.
    SAMPLES = [s(9.9, a=1e8, b=1e8), s(10.1, a=1e8, b=1e8), s(10.25, a=0.0, b=1e8),
               s(10.30, a=0.0, b=0.0), s(11.0, a=0.0, b=0.0), s(11.2, a=5e7, b=0.0),
               s(11.4, a=5e7, b=6e7), s(11.5, a=5e7)]

    def test_unpaced_when_the_last_program_loses_its_cap(self):
        self.assertAlmostEqual(metrics.unpaced_after_s(self.SAMPLES, 10.0, ["a", "b"]), 0.30)

    def test_rate_again_when_every_program_has_a_cap(self):
        self.assertAlmostEqual(metrics.rate_again_after_s(self.SAMPLES, 11.0, ["a", "b"]), 0.4)

    def test_a_program_gone_is_not_rated(self):
        self.assertIsNone(metrics.rate_again_after_s(self.SAMPLES[-1:], 11.45, ["a", "b"]))

    def test_nothing_within_the_window_is_none(self):
        self.assertIsNone(metrics.rate_again_after_s(self.SAMPLES, 11.0, ["a", "b"], t_end=11.3))
        self.assertIsNone(metrics.unpaced_after_s(self.SAMPLES[:3], 10.0, ["a", "b"]))

    def test_rated_fraction_counts_samples_in_the_window(self):
        # 10.1 rated; 10.25, 10.30 and 11.0 not.
        self.assertAlmostEqual(metrics.rated_fraction(self.SAMPLES, 10.0, 11.0, ["a", "b"]), 0.25)
        self.assertIsNone(metrics.rated_fraction(self.SAMPLES, 20, 21, ["a"]))

    def test_settled_is_the_start_of_the_last_rated_run(self):
        # Rated, a lapse at 10.25-10.30, rated from 11.4 on: a and b settle at 11.4.
        self.assertAlmostEqual(metrics.settled_after_s(self.SAMPLES[:7], 10.0, 11.4, ["a", "b"]), 1.4)
        self.assertEqual(metrics.settled_after_s(self.SAMPLES[:2], 9.0, 10.2, ["a", "b"]), 0.0)
        self.assertIsNone(metrics.settled_after_s(self.SAMPLES[:5], 9.0, 11.1, ["a", "b"]))

    def test_lapses_count_rated_to_unrated_changes(self):
        self.assertEqual(metrics.lapses(self.SAMPLES, 9.0, 12.0, ["a", "b"]), 2)
        self.assertEqual(metrics.lapses(self.SAMPLES, 11.3, 12.0, ["a"]), 0)

    def test_rated_at_lists_programs_capped_in_the_last_sample(self):
        self.assertEqual(metrics.rated_at(self.SAMPLES, 11.3), ["a"])
        self.assertEqual(metrics.rated_at(self.SAMPLES, 0), [])


class Stale(unittest.TestCase):
    def test_most_listed_and_time_until_none(self):
        polls = [(4.9, 2), (5.1, 2), (6.0, None), (7.0, 1), (8.05, 0), (8.2, 0)]
        self.assertEqual(metrics.stale(polls, 5.0)[0], 2)
        self.assertAlmostEqual(metrics.stale(polls, 5.0)[1], 3.05)

    def test_still_listed_at_the_end(self):
        self.assertEqual(metrics.stale([(1.0, 1), (2.0, 1)], 0.5), (1, None))


class Loss(unittest.TestCase):
    def test_all_intact_is_no_loss(self):
        self.assertEqual(metrics.pattern_loss(1000, 1000, 1000), 0)

    def test_bytes_after_a_mismatch_are_lost(self):
        self.assertEqual(metrics.pattern_loss(1000, 1000, 600), 400)

    def test_missing_tail_is_lost_when_the_sender_finished(self):
        self.assertEqual(metrics.pattern_loss(1000, 900, 900), 100)

    def test_killed_sender_counts_only_corruption(self):
        self.assertEqual(metrics.pattern_loss(None, 900, 900), 0)
        self.assertEqual(metrics.pattern_loss(None, 900, 850), 50)


class FileCheck(unittest.TestCase):
    def check(self, received, original, block=4):
        with tempfile.TemporaryDirectory() as d:
            r, o = os.path.join(d, "r"), os.path.join(d, "o")
            with open(r, "wb") as f:
                f.write(received)
            with open(o, "wb") as f:
                f.write(original)
            return metrics.file_check(r, o, block)

    def test_an_identical_download_is_all_intact(self):
        got, intact, sha = self.check(b"0123456789", b"0123456789")
        self.assertEqual((got, intact), (10, 10))
        self.assertEqual(sha, hashlib.sha256(b"0123456789").hexdigest())
        self.assertEqual(metrics.file_loss(10, got, intact), 0)

    def test_a_wrong_byte_stops_the_intact_count_across_blocks(self):
        got, intact, _ = self.check(b"01234x6789", b"0123456789")
        self.assertEqual((got, intact), (10, 5))
        self.assertEqual(metrics.file_loss(10, got, intact), 5)

    def test_short_and_long_downloads(self):
        self.assertEqual(self.check(b"0123", b"0123456789")[:2], (4, 4))
        self.assertEqual(metrics.file_loss(10, 4, 4), 6)
        got, intact, _ = self.check(b"0123456789ab", b"0123456789")
        self.assertEqual((got, intact), (12, 10))
        self.assertEqual(metrics.file_loss(10, got, intact), 2)

    def test_nothing_received(self):
        self.assertEqual(metrics.file_check("/nonexistent/x", "/nonexistent/y"), (0, 0, None))


class Verdicts(unittest.TestCase):
    LIMITS = {"unpaced_s": 0.4, "rate_again_s": 2.1, "stale_s": 3.2}

    def test_a_clean_run_breaks_nothing(self):
        summary = {"kill9_restart": {"bytes_lost": 0, "app_errors": 0, "unpaced_after_s": 0.28,
                                     "rate_again_after_s": 0.3},
                   "endpoint_killed": {"bytes_lost": 0, "app_errors": 0, "stale_flows": 1,
                                       "stale_for_s": 3.01},
                   "relay_killed": {"skipped": "no relays"}}
        self.assertEqual(metrics.verdicts(summary, self.LIMITS), [])

    def test_each_broken_promise_is_named(self):
        summary = {"sigstop": {"bytes_lost": 5, "app_errors": 1, "unpaced_after_s": 0.41,
                               "rate_again_after_s": None},
                   "endpoint_killed": {"bytes_lost": 0, "app_errors": 0, "stale_for_s": None}}
        bad = metrics.verdicts(summary, self.LIMITS)
        self.assertEqual(len(bad), 5, bad)
        self.assertTrue(any("5 bytes lost" in b for b in bad))
        self.assertTrue(any("still paced 0.410 s" in b for b in bad))
        self.assertTrue(any("without a rate at the end" in b for b in bad))
        self.assertTrue(any(b.startswith("endpoint_killed") for b in bad))

    def test_no_rate_before_the_fault_is_broken(self):
        bad = metrics.verdicts({"disk_full": {"bytes_lost": 0, "app_errors": 0,
                                              "not_rated_at_start": True}}, self.LIMITS)
        self.assertEqual(len(bad), 1, bad)

    def test_unpacing_is_judged_only_where_the_allocator_disappears(self):
        summary = {"control_delay": {"bytes_lost": 0, "app_errors": 0, "unpaced_after_s": None,
                                     "rate_again_after_s": 0.01}}
        self.assertEqual(metrics.verdicts(summary, self.LIMITS), [])

    def test_worst_round_or_none(self):
        self.assertEqual(metrics.worst([0.1, 0.3, 0.2]), 0.3)
        self.assertIsNone(metrics.worst([0.1, None]))
        self.assertIsNone(metrics.worst([]))


class Table(unittest.TestCase):
    def test_one_line_per_fault_and_skips_give_their_reason(self):
        t = metrics.table({"sigstop": {"bytes_lost": 0, "app_errors": 0, "unpaced_after_s": 0.25},
                           "relay_killed": {"skipped": "no relays"}}).splitlines()
        self.assertEqual(len(t), 3)
        self.assertIn("0.250", t[1])
        self.assertIn("skipped: no relays", t[2])


class Agents(unittest.TestCase):
    SS = ("0      0      10.79.0.1:41234 10.79.0.2:5201\n"
          "\t cubic wscale:7,7 rto:204 pacing_rate 61.9Mbps/49.5Mbps delivery_rate 48Mbps\n"
          "0      1448   10.79.0.1:8080 10.79.0.2:51000\n"
          "\t cubic rto:204 pacing_rate 2.1Gbps delivery_rate 1Gbps\n"
          "0      0      [::ffff:10.79.0.1]:41000 [::ffff:10.79.0.2]:7001\n"
          "\t bbr pacing_rate 100Mbps/25000Kbps\n")

    def test_ss_lines_give_ports_and_the_max_pacing_rate(self):
        self.assertEqual(agents.parse_ss(self.SS),
                         [[41234, 5201, 49.5e6], [8080, 51000, 0.0], [41000, 7001, 25e6]])

    def test_pattern_check_finds_the_first_wrong_byte(self):
        p = agents.WINDOW
        self.assertEqual(agents.check_chunk(p[10:5000], 10), 4990)
        self.assertEqual(agents.check_chunk(p[10:5000], 10 + agents.PERIOD), 4990)
        bad = bytearray(p[100:200])
        bad[37] ^= 1
        self.assertEqual(agents.check_chunk(bytes(bad), 100), 37)
        # A lost byte shifts the stream: the check fails from there.
        self.assertLess(agents.check_chunk(p[0:50] + p[51:200], 0), 199)

    def test_java_builds_the_same_pattern(self):
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "NioSender.java")) as f:
            src = f.read()
        self.assertIn("PERIOD = %d" % agents.PERIOD, src)
        self.assertIn("* 131 + 17) & 0xff", src)
        self.assertEqual(agents.PATTERN[:3], bytes([17, 148, 279 & 0xFF]))


if __name__ == "__main__":
    unittest.main()
