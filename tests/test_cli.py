"""``python -m tilesparse bench`` and ``plot`` on the CPU (``demo`` and ``explain`` are checked
in test_readme.py).

``bench`` hands its options to the benchmark engine (``--quick`` is ``--grid quick``); one tiny
run (T=64, one head, Triton interpreted) checks the JSON, the figure and the table it prints.
``plot`` redraws that run's figure and draws a pattern's tile map; wrong input exits 2 with a
message saying what to give instead. The engine's own grid is tested in test_bench_quick.py.
"""

import json

import pytest

from tilesparse.bench.tile_map import MAX_T
from tilesparse.cli import COMMANDS, build_parser, main

HASH = '{"kind": "hash", "buckets": 4}'


def test_every_command_is_listed_in_help(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command.__name__.rpartition(".")[2] in out


def test_bench_quick_forwards_to_the_engine_and_plot_redraws_it(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "--quick", "--patterns", "hash16", "--t", "64", "--h", "1", "--decide", "excluded",
            "--cpu-reps", "1", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "pattern" in printed and "hash16" in printed  # the table, last
    results = json.loads(out.read_text())
    assert results["meta"]["grid"] == "quick" and results["meta"]["seqlens"] == [64]
    assert {(r["pattern"], r["mode"]) for r in results["rows"]} == {("hash16", "fwd"), ("hash16", "fwd_bwd")}
    assert all(r["ms"]["ours"] > 0 and not r["errors"] for r in results["rows"])
    assert out.with_suffix(".png").stat().st_size > 0

    png = tmp_path / "again.png"
    assert main(["plot", str(out), "--out", str(png)]) == 0
    assert png.stat().st_size > 0 and f"png: {png}" in capsys.readouterr().out


def test_bench_help_is_the_engines(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "--quick is --grid quick" in out and "--patterns" in out and "--grid" in out


def test_other_commands_reject_unknown_options(capsys):
    with pytest.raises(SystemExit) as e:
        main(["explain", HASH, "--no-such-option"])
    assert e.value.code == 2
    assert "unrecognized arguments: --no-such-option" in capsys.readouterr().err


def test_plot_tile_map(tmp_path, capsys):
    png = tmp_path / "tiles.png"
    spec = '{"kind": "per_head", "dense_heads": [0], "rest": ' + HASH + "}"
    assert main(["plot", "--tile-map", spec, "--seqlen", "256", "--heads", "2", "--out", str(png)]) == 0
    assert png.stat().st_size > 0 and f"png: {png}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plot"], "give either RESULTS_JSON or --tile-map SPEC_JSON"),
        (["plot", "x.json", "--tile-map", HASH], "give either RESULTS_JSON or --tile-map SPEC_JSON"),
        (["plot", "--tile-map", '{"kind": "hash", "buckets": 0}'], "buckets must be in [1, 65536], got 0"),
        (["plot", "--tile-map", HASH, "--seqlen", str(MAX_T + 1)], f"seqlen must be in [1, {MAX_T}]"),
        (["plot", "no-such-file.json"], "no-such-file.json"),
    ],
)
def test_plot_errors_say_what_to_give(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_plot_points_a_training_json_to_its_script(tmp_path, capsys):
    results = tmp_path / "train.json"
    results.write_text(json.dumps({"meta": {"script": "examples/train_lm.py"}, "runs": []}))
    assert main(["plot", str(results)]) == 2
    assert f"python examples/train_lm.py --plot {results}" in capsys.readouterr().err


def test_without_the_cli_extra_the_command_names_it():
    """Without rich (or matplotlib) the command line exits 1 naming the extra to install."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['rich'] = None; sys.argv = ['tilesparse', 'demo']\n"
        "from tilesparse.__main__ import main; sys.exit(main())"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "pip install 'tilesparse[cli]'" in r.stderr and "missing: rich" in r.stderr
