"""The `zmesh` command line: version, help, and the microbenchmark subcommand's options."""

from __future__ import annotations

import argparse

import pytest

from zmesh import __version__, cli


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"zmesh {__version__}"


def test_help_lists_the_microbenchmark_command(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: zmesh" in out and "microbenchmark" in out


def test_no_command_prints_help_and_succeeds(capsys):
    assert cli.main([]) == 0
    assert "usage: zmesh" in capsys.readouterr().out


def test_microbenchmark_help_names_its_options(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["microbenchmark", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--quick", "--only", "--json", "--baseline"):
        assert option in out


def test_unknown_command_is_an_error_naming_it(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["microbenchmrk"])
    assert info.value.code == 2
    assert "microbenchmrk" in capsys.readouterr().err


def test_unknown_workload_exits_2_and_suggests_the_closest_name(capsys):
    assert cli.main(["microbenchmark", "--only", "tasks_snyc"]) == 2
    err = capsys.readouterr().err
    assert "'tasks_snyc'" in err and "did you mean 'tasks_sync'" in err


def test_cli_and_script_accept_the_same_microbenchmark_options():
    bench = cli._load_microbenchmark()
    script = argparse.ArgumentParser()
    bench.add_arguments(script)
    command = argparse.ArgumentParser()
    cli._microbenchmark_arguments(command)

    def options(p: argparse.ArgumentParser) -> set[str]:
        return {s for a in p._actions for s in a.option_strings}

    assert options(script) == options(command)


def test_only_accepts_workload_and_metric_names_in_suite_order():
    bench = cli._load_microbenchmark()
    assert bench.resolve_only("put_small,tasks_sync") == ["tasks_sync", "put_get_small"]
    assert bench.resolve_only(None) == bench.ORDER


def test_insecure_node_warns_loudly():
    import subprocess
    import sys

    # 192.0.2.1 (TEST-NET) is no address of this machine: the bind fails after the warning.
    proc = subprocess.run([sys.executable, "-m", "zmesh", "node", "--host", "192.0.2.1",
                           "--insecure"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "WARNING: --insecure" in proc.stderr and "192.0.2.1" in proc.stderr


def test_joining_with_a_malformed_token_fails_at_once_naming_it():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "zmesh", "node", "--join", "127.0.0.1:9",
                           "--token", "zmesh1-not-a-token"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "malformed zmesh join token" in proc.stderr
