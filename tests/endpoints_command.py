"""``automem endpoints check`` run on an endpoints file written for the test: its exit code and what it printed."""

from automem_dagster.cli import main


def run_check(tmp_path, capsys, body: str, *extra: str) -> tuple[int, str]:
    path = tmp_path / "endpoints.yaml"
    path.write_text(body)
    code = main(["endpoints", "check", "--endpoints", str(path), *extra])
    return code, capsys.readouterr().out
