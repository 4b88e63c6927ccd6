"""Off a terminal the commands' console never hard-wraps a line: a message stays greppable."""

from tidb_binlog.cli.console import make_console


def test_a_long_line_is_printed_whole_off_a_terminal(capsys):
    console = make_console()
    message = "workload failed: " + " ".join(f"word{i}" for i in range(60))
    console.print(message)
    out = capsys.readouterr().out
    assert out == message + "\n"
