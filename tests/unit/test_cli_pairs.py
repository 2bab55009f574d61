"""`queues stats` and `queues show` print one record as `key  value` lines (cli/table.py)."""

from __future__ import annotations

from dreamlake.lakeshore.cli.table import pair_lines


def test_keys_align_and_a_long_value_folds_under_itself_without_losing_a_word() -> None:
    words = " ".join(f"word{i}" for i in range(40))

    lines = pair_lines([("name", "q"), ("description", words), ("pending", 1_000_000)], width=80)

    assert lines[0] == "name         q"
    assert lines[-1] == "pending      1000000"
    folded = lines[1:-1]
    assert len(folded) > 1 and all(len(line) <= 80 for line in folded)
    assert folded[0].startswith("description  word0 ")
    assert all(line.startswith(" " * 13) for line in folded[1:])
    assert (
        " ".join(line.split(maxsplit=0)[0].strip() for line in folded).split()[1:] == words.split()
    )


def test_a_value_is_shown_as_text_not_as_markup() -> None:
    # rich, which drew these before, read `[bold]` in a description as a style and dropped it
    assert pair_lines([("description", "[bold] not a style [/]")], width=80) == [
        "description  [bold] not a style [/]"
    ]
