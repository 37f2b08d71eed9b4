"""hfdoctor.bounded.budget: one repository's allowance of time and bytes, and the bounded read."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hfdoctor.bounded.budget import DEFAULT_BYTES, DEFAULT_SECONDS, MAX_SKIPPED, Budget, read_at_most


@given(st.integers(0, 1000), st.lists(st.integers(0, 400), max_size=20))
def test_take_charges_what_fits_and_nothing_else(allowance, requests):
    budget = Budget(bytes=allowance)
    granted = 0
    for n in requests:
        fits = n <= allowance - granted
        assert budget.take(n) is fits
        granted += n if fits else 0
        assert budget.spent_bytes == granted and budget.bytes_left() == allowance - granted


def test_a_take_that_does_not_fit_charges_nothing():
    budget = Budget(bytes=10)
    assert budget.take(7) and not budget.take(4)
    assert budget.spent_bytes == 7 and budget.take(3) and budget.bytes_left() == 0


def test_skip_records_each_thing_once_in_order():
    budget = Budget(seconds=2, bytes=3 * 1024**3)
    budget.skip_for_time("template rendering")
    budget.skip_for_bytes("model.safetensors")
    budget.skip("template rendering", "again, for another reason")
    budget.skip("template", "a name that starts like another one is another thing")
    assert budget.skipped == [
        "template rendering (the 2 s time budget of this repository ran out)",
        "model.safetensors (the 3 GiB read budget of this repository ran out)",
        "template (a name that starts like another one is another thing)",
    ]


def test_skips_under_one_key_are_one_entry_and_the_entries_are_bounded():
    """A GGUF of 20,000 named templates skipped each (a scan of every earlier entry each time: 88 s);
    one key stands for "X and any after it", and past MAX_SKIPPED only a count is kept."""
    budget = Budget()
    for i in range(20_000):
        budget.skip(f"the template t{i} and any after it", "out of time", key="templates")
    assert budget.skipped == ["the template t0 and any after it (out of time)"] and budget.noted("templates")
    for i in range(MAX_SKIPPED + 10):
        budget.skip(f"file {i}", "unreadable")
    assert len(budget.skipped) == MAX_SKIPPED and budget.skipped_more == 11
    assert not budget.noted("file -1") and budget.noted("file 3")


def test_what_a_check_keeps_is_charged_against_its_allowance():
    budget = Budget(keep_bytes=100)
    budget.keep(60)
    assert budget.keeping_left() == 40
    budget.keep(60)  # charged after the fact: it may pass the allowance once
    assert budget.keeping_left() == 0


def test_a_spent_deadline_leaves_nothing():
    budget = Budget(seconds=0)
    assert budget.expired() and budget.remaining() == 0.0
    roomy = Budget(seconds=3600)
    assert not roomy.expired() and 0 < roomy.remaining() <= 3600


def test_from_env_takes_positive_numbers_only(monkeypatch):
    monkeypatch.setenv("HFDOCTOR_BUDGET_SECONDS", "2.5")
    monkeypatch.setenv("HFDOCTOR_BUDGET_BYTES", "4096")
    assert (Budget.from_env().seconds, Budget.from_env().bytes) == (2.5, 4096)
    for bad in ("", "nan-ish", "-1", "0"):
        monkeypatch.setenv("HFDOCTOR_BUDGET_SECONDS", bad)
        monkeypatch.setenv("HFDOCTOR_BUDGET_BYTES", bad)
        assert (Budget.from_env().seconds, Budget.from_env().bytes) == (DEFAULT_SECONDS, DEFAULT_BYTES), bad


def _read_pipe(data: bytes, limit: int) -> bytes | None:
    read_end, write_end = os.pipe()
    try:
        if data:
            os.write(write_end, data)
        os.close(write_end)
        write_end = -1
        return read_at_most(read_end, limit)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


@given(st.binary(max_size=3000), st.integers(0, 4000))
def test_read_at_most_gives_the_bytes_or_none_when_over_the_limit(data, limit):
    # A pipe has no size to check first: only what is read decides, as for a file that grew.
    assert _read_pipe(data, limit) == (data if len(data) <= limit else None)


def test_read_regular_file_refuses_what_is_not_a_small_regular_file(tmp_path):
    from hfdoctor.bounded.budget import NotReadable, read_regular_file

    small = tmp_path / "small.json"
    small.write_bytes(b"{}")
    assert read_regular_file(small, 2) == b"{}"
    with pytest.raises(NotReadable, match="more than the 1 "):
        read_regular_file(small, 1)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened without blocking, then refused: never a wait for a writer
    with pytest.raises(NotReadable, match="not a regular file"):
        read_regular_file(fifo, 100)
    link = tmp_path / "link"
    link.symlink_to(small)
    assert read_regular_file(link, 100) == b"{}"
    with pytest.raises(NotReadable, match="cannot be read"):
        read_regular_file(link, 100, follow_symlinks=False)
