"""`import mist` (python/mist_module.cpp, docs/python.md): its results equal what the command's --json
prints for the same inputs, dicts read like files, errors name the field.

Run by ctest (Python.Module) with PYTHONPATH at the module's folder and MIST_BINARY, MIST_SOURCE_DIR
set; by hand: PYTHONPATH=build/python MIST_BINARY=build/mist python3 tests/python/test_mist.py
"""

import json
import os
import pathlib
import subprocess
import tempfile
import unittest

import mist

SOURCE = pathlib.Path(os.environ.get("MIST_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BINARY = os.environ.get("MIST_BINARY", str(SOURCE / "build" / "mist"))
JOBS = SOURCE / "tests" / "data" / "golden" / "jobs"

# A small job: GPT 1.3B on 2 A100s (the golden roundtrip-gpt1_3b cases); tune takes well under a second.
MODEL = "mist-gpt-1.3b"
CLUSTER = JOBS / "cluster_a100_1x2.json"
TRAINING = JOBS / "training_32x1024_bf16.json"
PLAN = JOBS / "plan_gpt1_3b_torchtitan.json"


def run_mist(*args, status=0):
    """The command's stdout as JSON, and its stderr."""
    p = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True, timeout=120)
    if p.returncode != status:
        raise AssertionError(f"mist {' '.join(map(str, args))}: exit {p.returncode}, expected {status}\n{p.stderr}")
    return (json.loads(p.stdout) if p.stdout else None), p.stderr


def load(path):
    return json.loads(pathlib.Path(path).read_text())


class Predict(unittest.TestCase):
    def test_equals_the_command_on_a_catalog_model(self):
        cli, _ = run_mist("predict", "--model", MODEL, "--cluster", CLUSTER, "--training", TRAINING,
                          "--plan", PLAN, "--json")
        self.assertEqual(mist.predict(MODEL, str(CLUSTER), str(TRAINING), str(PLAN)), cli)

    def test_engine_and_uncalibrated_are_the_commands(self):
        cli, _ = run_mist("predict", "--model", MODEL, "--cluster", CLUSTER, "--training", TRAINING,
                          "--plan", PLAN, "--engine", "torchtitan", "--uncalibrated", "--json")
        got = mist.predict(MODEL, CLUSTER, TRAINING, PLAN, engine="torchtitan", uncalibrated=True)
        self.assertEqual(got, cli)
        self.assertEqual(got["calibration"]["kind"], "none")

    def test_dicts_read_like_the_files(self):
        from_files = mist.predict(MODEL, CLUSTER, TRAINING, PLAN)
        from_dicts = mist.predict(MODEL, load(CLUSTER), load(TRAINING), load(PLAN))
        self.assertEqual(from_dicts, from_files)
        # A model given as a dict (mist's model form) reads like its file, and like the command.
        model_file, cluster = JOBS / "model_tiny.json", {"gpu": "A100-SXM4-80GB", "nodes": 1, "gpus_per_node": 1}
        cluster_file = pathlib.Path(self.tmp) / "cluster.json"
        cluster_file.write_text(json.dumps(cluster))
        tiny = [JOBS / "training_tiny.json", JOBS / "plan_tiny.json"]
        cli, _ = run_mist("predict", "--model", model_file, "--cluster", cluster_file, "--training", tiny[0],
                          "--plan", tiny[1], "--json")
        self.assertEqual(mist.predict(model_file, cluster, *tiny), cli)
        self.assertEqual(mist.predict(load(model_file), cluster, *map(load, tiny)), cli)

    def test_a_bad_field_raises_mist_error_naming_it(self):
        training = load(TRAINING) | {"seq_length": 0}
        with self.assertRaises(mist.Error) as caught:
            mist.predict(MODEL, CLUSTER, training, PLAN)
        e = caught.exception
        self.assertIsInstance(e, ValueError)
        self.assertEqual(e.field, "training.seq_length")
        self.assertIn("at least 1", e.reason)
        self.assertEqual(str(e), f"invalid input: training.seq_length: {e.reason}")

    def test_the_message_is_the_commands(self):
        plan = load(PLAN)
        plan["stages"][0]["zero"] = 7
        bad = pathlib.Path(self.tmp) / "plan.json"
        bad.write_text(json.dumps(plan))
        _, stderr = run_mist("predict", "--model", MODEL, "--cluster", CLUSTER, "--training", TRAINING,
                             "--plan", bad, "--json", status=2)
        with self.assertRaises(mist.Error) as caught:
            mist.predict(MODEL, CLUSTER, TRAINING, bad)
        self.assertEqual("mist: " + str(caught.exception) + "\n", stderr)
        self.assertEqual(caught.exception.field, "plan.stages[0].zero")
        # The same plan as a dict: the same field, no file named.
        with self.assertRaises(mist.Error) as caught:
            mist.predict(MODEL, CLUSTER, TRAINING, plan)
        self.assertEqual(caught.exception.field, "plan.stages[0].zero")
        self.assertNotIn("(in ", str(caught.exception))

    def test_unknown_names_and_options(self):
        with self.assertRaises(mist.Error) as caught:
            mist.predict("no-such-model", CLUSTER, TRAINING, PLAN)
        # A path or name that is not a file: under the argument that gave it (as --model does).
        self.assertEqual(caught.exception.field, "model")
        self.assertIn("no-such-model", str(caught.exception))
        with self.assertRaises(mist.Error) as caught:
            mist.predict(MODEL, CLUSTER, TRAINING, PLAN, engine="jax")
        self.assertEqual(caught.exception.field, "--engine")
        with self.assertRaises(mist.Error) as caught:
            mist.predict(MODEL, CLUSTER, load(TRAINING) | {"seq_lenght": 1024}, PLAN)
        self.assertEqual(caught.exception.field, "training.seq_lenght")

    def test_bad_types_raise_never_crash(self):
        # A list where a dict is expected: the parser's own error.
        with self.assertRaises(mist.Error) as caught:
            mist.predict(MODEL, [1, 2], TRAINING, PLAN)
        self.assertEqual(caught.exception.field, "cluster")
        # Values that are not JSON, keys that are not str, None, bytes: TypeError naming where.
        for cluster, where in [({"gpu": "A100-SXM4-80GB", "nodes": {1}}, "cluster.nodes"),
                               ({"gpu": object()}, "cluster.gpu"), ({1: 2}, "cluster"), (None, "cluster"),
                               (b"cluster.json", "cluster")]:
            with self.subTest(cluster=cluster):
                with self.assertRaises(TypeError) as caught:
                    mist.predict(MODEL, cluster, TRAINING, PLAN)
                self.assertTrue(str(caught.exception).startswith(where), str(caught.exception))
        # A wrong JSON type inside: the field and the type.
        with self.assertRaises(mist.Error) as caught:
            mist.predict(MODEL, CLUSTER, load(TRAINING) | {"seq_length": "1024"}, PLAN)
        self.assertEqual(caught.exception.field, "training.seq_length")
        # NaN is refused by the field's reader, as an inf in a file would be.
        with self.assertRaises(mist.Error) as caught:
            mist.predict(MODEL, load(CLUSTER) | {"inter_node_GBps": float("nan")}, TRAINING, PLAN)
        self.assertEqual(caught.exception.field, "cluster.inter_node_GBps")
        # A cycle ends at the nesting limit.
        cyclic = load(PLAN)
        cyclic["stages"][0]["offload"] = cyclic
        with self.assertRaises(ValueError):
            mist.predict(MODEL, CLUSTER, TRAINING, cyclic)
        with self.assertRaises(TypeError):
            mist.predict(MODEL, CLUSTER, TRAINING, PLAN, engine=3)

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()


class Tune(unittest.TestCase):
    def test_equals_the_command(self):
        cli, _ = run_mist("tune", "--model", MODEL, "--cluster", CLUSTER, "--training", TRAINING, "--json")
        got = mist.tune(MODEL, CLUSTER, TRAINING)
        self.assertEqual(got, cli)
        self.assertIn("plan", got)
        self.assertTrue(got["prediction"]["fits"])

    def test_options_are_the_commands(self):
        cli, _ = run_mist("tune", "--model", MODEL, "--cluster", CLUSTER, "--training", TRAINING, "--json",
                          "--engine", "megatron", "--top", "2", "--no-offload", "--virtual-stages", "1,2")
        got = mist.tune(MODEL, load(CLUSTER), load(TRAINING), engine="megatron", top=2, no_offload=True,
                        virtual_stages=[1, 2])
        self.assertEqual(got, cli)
        self.assertEqual(got["space"], "megatron")
        self.assertLessEqual(len(got["alternatives"]), 1)

    def test_engines_and_compare_options_are_the_commands(self):
        flags = "--micro-batch-size 1 --global-batch-size 32"
        cli, _ = run_mist("tune", "--model", MODEL, "--cluster", CLUSTER, "--training", TRAINING, "--json",
                          "--no-engines", "--compare-to", flags, "--job-from-flags")
        got = mist.tune(MODEL, CLUSTER, TRAINING, no_engines=True, compare_to=flags, job_from_flags=True)
        self.assertEqual(got, cli)
        self.assertNotIn("engines", got)
        self.assertEqual(got["compare_to"]["job_from"], "flags")

    def test_no_fit_is_a_result(self):
        # GPT-3 13B on 2 A100s fits in no plan: the dict the command prints with exit 3.
        args = ["--model", "gpt3-13b", "--cluster", CLUSTER, "--training", TRAINING, "--no-offload"]
        cli, _ = run_mist("tune", *args, "--json", status=3)
        got = mist.tune("gpt3-13b", CLUSTER, TRAINING, no_offload=True)
        self.assertEqual(got, cli)
        self.assertFalse(got["fits"])

    def test_errors_name_the_option(self):
        for kwargs, field in [({"space": "nope"}, "--space"), ({"top": 0}, "--top"),
                              ({"virtual_stages": "1,x"}, "--virtual-stages"), ({"solver": "lp"}, "--solver"),
                              ({"engine": "megatron", "space": "deepspeed"}, "--engine")]:
            with self.subTest(**kwargs):
                with self.assertRaises(mist.Error) as caught:
                    mist.tune(MODEL, CLUSTER, TRAINING, **kwargs)
                self.assertEqual(caught.exception.field, field)
        with self.assertRaises(TypeError):
            mist.tune(MODEL, CLUSTER, TRAINING, virtual_stages=[1.5])


class Gpus(unittest.TestCase):
    CANDIDATES = ["H100-SXM5-80GB", "A100-SXM4-80GB"]

    def test_equals_the_command(self):
        cli, _ = run_mist("gpus", "--model", MODEL, "--training", TRAINING, "--candidates", ",".join(self.CANDIDATES),
                          "--gpus", "2,4", "--threads", "1", "--json")
        got = mist.gpus(MODEL, TRAINING, self.CANDIDATES, counts=[2, 4], threads=1)
        self.assertEqual(got, cli)
        self.assertEqual(len(got["rows"]), 4)
        self.assertEqual(mist.gpus(MODEL, load(TRAINING), ",".join(self.CANDIDATES), counts="2,4"), cli)

    def test_errors_name_the_option(self):
        with self.assertRaises(mist.Error) as caught:
            mist.gpus(MODEL, TRAINING, self.CANDIDATES, counts=[2], threads=0)
        self.assertEqual(caught.exception.field, "--threads")
        with self.assertRaises(mist.Error) as caught:
            mist.gpus(MODEL, TRAINING, self.CANDIDATES, counts=[2], gpus_per_node=0)
        self.assertEqual(caught.exception.field, "--gpus-per-node")
        with self.assertRaises(mist.Error):
            mist.gpus(MODEL, TRAINING, ["H100"], counts=[2])
        with self.assertRaises(TypeError):
            mist.gpus(MODEL, TRAINING, [8], counts=[2])
        with self.assertRaises(TypeError):
            mist.gpus(MODEL, TRAINING, self.CANDIDATES, counts=["two"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
