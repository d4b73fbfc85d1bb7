"""The OVSDB adapter's group commit (nestednet.adapters.ovsdb._GroupCommit): port adds
from threads that arrive while a transaction is under way go together in the next one,
each caller returns only once its own items are committed, and a failed transaction is
every one of its callers' error."""

from __future__ import annotations

import threading

import pytest

from nestednet.adapters.ovsdb import _GroupCommit

pytestmark = pytest.mark.unit


def test_calls_arriving_during_a_commit_share_the_next_one():
    release = threading.Event()
    commits: list[list] = []

    def commit(items: list) -> None:
        commits.append(sorted(items))
        if len(commits) == 1:
            release.wait(5)

    group = _GroupCommit(commit)
    first = threading.Thread(target=group.submit, args=([0],))
    first.start()
    while not commits:
        threading.Event().wait(0.01)
    others = [threading.Thread(target=group.submit, args=([k, k + 100],)) for k in (1, 2, 3)]
    for t in others:
        t.start()
    while sum(len(p.items) for p in group.queue) < 6:
        threading.Event().wait(0.01)
    assert commits == [[0]]
    release.set()
    for t in (first, *others):
        t.join(5)
        assert not t.is_alive()
    assert commits == [[0], [1, 2, 3, 101, 102, 103]]
    group.submit([7])
    assert commits[-1] == [7]


def test_a_failed_commit_is_the_error_of_each_caller_in_it_and_no_later_one():
    release = threading.Event()
    calls = []

    def commit(items: list) -> None:
        calls.append(items)
        if len(calls) == 1:
            release.wait(5)
        elif len(calls) == 2:
            raise RuntimeError("port exists")

    group = _GroupCommit(commit)
    errors: dict[int, str] = {}

    def submit(k: int) -> None:
        try:
            group.submit([k])
        except RuntimeError as exc:
            errors[k] = str(exc)

    threads = [threading.Thread(target=submit, args=(0,))]
    threads[0].start()
    while not calls:
        threading.Event().wait(0.01)
    threads += [threading.Thread(target=submit, args=(k,)) for k in (1, 2)]
    for t in threads[1:]:
        t.start()
    while len(group.queue) < 2:
        threading.Event().wait(0.01)
    release.set()
    for t in threads:
        t.join(5)
    assert errors == {1: "port exists", 2: "port exists"}
    group.submit([3])
    assert calls[-1] == [3] and not group.busy
