"""Mistakes `mypy --strict` must see through resil's decorators (their
lines are listed in test_typing.py)."""
import resil

r = resil.open_embedded()
p = r.policy("x")


@p.guard
def charge(card: str) -> int:
    return len(card)


@p.guard(fallback=lambda card: 0)
async def acharge(card: str) -> int:
    return len(card)


charge(42)                           # line 19: an int for a str
s: str = charge("4242")              # line 20: an int is no str
p.call(charge, 1)                    # line 21: call keeps the signature
n: int = acharge("4242")             # line 22: a coroutine, not an int
p.acquire(12)                        # line 23: a key is str or bytes
