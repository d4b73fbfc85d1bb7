"""Archives of users' images in the cache directory: one per reference, older ones pruned."""

from __future__ import annotations

import pytest

from nestednet.images import archive_kind, stale_archives

pytestmark = pytest.mark.unit


def test_a_rebuilt_user_image_replaces_only_its_own_older_archive(tmp_path) -> None:
    kind = archive_kind("nestednet-test/user-gnab:route")
    assert kind == "user-nestednet_test_user_gnab_route"
    names = [f"{kind}-{'a' * 16}.tar", f"{kind}-{'b' * 16}.tar",
             f"{archive_kind('other:1')}-{'c' * 16}.tar",
             f"{kind}_x-{'d' * 16}.tar",  # another reference sharing a prefix
             f"user-{'e' * 16}.tar",  # named by image id alone (older releases)
             f"component-route-{'f' * 16}.tar", "notes.txt"]
    for name in names:
        (tmp_path / name).write_text("")
    keep = tmp_path / names[1]
    assert sorted(p.name for p in stale_archives(tmp_path, kind, keep)) == sorted(
        [names[0], names[4]])


def test_component_archives_keep_their_per_checkout_families(tmp_path) -> None:
    a, b, c = (tmp_path / f"component-{t}-{'1' * 16}.tar" for t in ("route", "route-x", "ca"))
    newer = tmp_path / f"component-route-{'2' * 16}.tar"
    for path in (a, b, c, newer):
        path.write_text("")
    assert stale_archives(tmp_path, "component-route", newer) == [a]
