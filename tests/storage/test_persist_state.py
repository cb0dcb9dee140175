"""Invariants of the persist backend's pure state commands (`twofold.storage.persist.state`),
over random command sequences: since never moves backwards and never passes a live reader;
parts stay disjoint, ordered and uniquely numbered through appends, spills, tail merges and
replacements, and no update is lost or duplicated."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import Frontier
from twofold.storage.persist import state as S
from twofold.testing.profiles import examples

NOW = 1_000_000

commands = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5), st.integers(0, 9), st.booleans()),
        st.tuples(st.just("downgrade"), st.integers(0, 60)),
        st.tuples(st.just("reader"), st.sampled_from("abc"), st.integers(0, 60),
                  st.sampled_from([None, 0, 10_000])),
        st.tuples(st.just("drop"), st.sampled_from("abc")),
        st.tuples(st.just("heartbeat"), st.sampled_from("abc"), st.integers(0, 60)),
        st.tuples(st.just("replace"), st.integers(0, 6), st.integers(1, 3)),
        st.tuples(st.just("spill"),),
        st.tuples(st.just("tail merge"), st.integers(1, 40)),
    ),
    max_size=30,
)


def check_parts(data: S.StateData) -> None:
    ids = [p.id for p in data.parts]
    assert len(set(ids)) == len(ids) and all(i < data.next_part_id for i in ids)
    for a, b in zip(data.parts, data.parts[1:], strict=False):
        assert a.upper is not None and a.upper <= b.lower, "parts overlap or are out of order"


@settings(max_examples=examples(200), deadline=None)
@given(cmds=commands)
def test_state_commands_keep_their_invariants(cmds: list[Any]) -> None:
    data = S.StateData()
    upper = 0
    total = 0
    for cmd in cmds:
        before = S.dec(data.since)
        live_before = S.live_readers(data, NOW)
        if cmd[0] == "append":
            _, width, count, inline = cmd
            part = S.PartRef(0, upper, upper + width, 0, count,
                             inline=f"i{upper}" if inline else None,
                             size=100 if inline else 0, key=None if inline else "k")
            data = S.append_part(data, part)
            upper += width
            total += count
        elif cmd[0] == "downgrade":
            requested = Frontier.at(cmd[1])
            data = S.downgrade_since(data, requested, NOW)
            after = S.dec(data.since)
            if after != before:  # it moved: to no further than asked or any live reader holds
                assert after.less_equal(requested)
                assert all(after.less_equal(S.dec(r.since)) for r in live_before.values())
        elif cmd[0] == "reader":
            _, rid, since, lease = cmd
            held = Frontier.at(since).join(S.dec(data.since))
            reader = S.ReaderState(S.enc(held), 1, lease is None, lease or 0,
                                   NOW - 5_000, "")
            data = S.with_reader(data, rid, reader, NOW)
            if lease == 0:  # expired at once: it holds nothing
                assert rid not in S.live_readers(data, NOW)
        elif cmd[0] == "drop":
            data = S.with_reader(data, cmd[1], None, NOW)
        elif cmd[0] == "heartbeat":
            _, rid, since = cmd
            data, lost = S.renew_readers(data, {rid: since}, 2, NOW)
            assert (rid in lost) == (rid not in live_before)
            if rid not in lost:
                held = S.dec(live_before[rid].since).join(Frontier.at(since))
                assert S.dec(data.readers[rid].since) == held  # moved forward, never back
        if cmd[0] in ("reader", "drop", "heartbeat"):
            if not any(r.critical for r in S.live_readers(data, NOW).values()):
                # leased readers only hold since back: their moves never advance it
                assert S.dec(data.since) == before
        elif cmd[0] == "replace":
            _, start, n = cmd
            old = data.parts[start:start + n]
            if old:
                merged = S.PartRef(0, old[0].lower, old[-1].upper, 0,
                                   sum(p.count for p in old), key="merged")
                out = S.replace_parts(data, [p.id for p in old], merged)
                assert out is not None
                data = out
                assert S.replace_parts(data, [p.id for p in old], merged) is None  # gone now
        elif cmd[0] == "tail merge":
            run = S.plan_tail_merge(data, cmd[1])
            if run:
                assert len(run) >= 2 and list(data.parts[-len(run):]) == run
                assert all(p.key is not None and p.count < cmd[1] for p in run)
                merged = S.PartRef(0, run[0].lower, run[-1].upper, 0,
                                   sum(p.count for p in run), key="tail")
                out = S.replace_parts(data, [p.id for p in run], merged)
                assert out is not None
                data = out
        else:
            suffix = S.inline_suffix(data)
            assert all(p.inline is not None for p in suffix)
            if suffix:
                merged = S.PartRef(0, suffix[0].lower, suffix[-1].upper, 0,
                                   sum(p.count for p in suffix), key="spilled")
                data = S.spill(data, suffix, merged)
                assert data.parts[-1].key == "spilled"
        assert before.less_equal(S.dec(data.since)), "since moved backwards"
        assert all(S.dec(data.since).less_equal(S.dec(r.since))
                   for r in S.live_readers(data, NOW).values()), "since passed a live reader"
        check_parts(data)
        assert sum(p.count for p in data.parts) == total
        assert S.decode_state(S.encode_state(data)) == data
        for limit in (1, 2, 16):  # the appends' bounded look at the run of inlined parts
            assert S.inline_suffix_shorter(data, limit) == (len(S.inline_suffix(data)) < limit)


def test_unique_ids_differ_and_a_forked_child_draws_its_own_prefix() -> None:
    # A child sharing its parent's prefix and counter would reuse the parent's idempotency
    # tokens: a resolution after a lost connection could take the child's version for the
    # parent's.
    import os

    from twofold.storage.persist.base import UniqueIds

    ids = UniqueIds()
    tokens = [ids.token() for _ in range(1000)]
    keys = [ids.key() for _ in range(1000)]
    assert len(set(tokens)) == 1000 and len(set(keys)) == 1000
    assert all(len(t) == 16 for t in tokens)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report a token and leave at once
        os.write(write, ids.token())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 16)
    os.close(read)
    os.close(write)
    assert len(child) == 16 and child[:8] != ids.token()[:8]
