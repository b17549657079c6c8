"""What an application writes with resil, checked by `mypy --strict`
(test_typing.py): no error, no Any leaking out of the decorators."""
import asyncio
from typing import Dict, Optional

import httpx

import resil
import resil.django
import resil.httpx

r = resil.open_embedded()
r.define("payments", "breaker.window = consecutive:5; bulkhead.max = 4; bulkhead.wait = 1s")
payments = r.policy("payments", ignore=(KeyError,), deadline=2.0)


@payments.guard
def charge(card: str, amount: int = 1) -> Dict[str, object]:
    return {"card": card, "amount": amount}


@payments.guard(fallback=lambda card: {"card": card, "queued": True})
def pay(card: str) -> Dict[str, object]:
    return charge(card, amount=2)


@payments.retrying
async def fetch(n: int) -> bytes:
    await asyncio.sleep(0)
    return b"x" * n


async def main() -> int:
    async with payments.acquire_async(timeout=1.0) as permit:
        permit.outcome("success")
    permit2 = await payments.acquire_async("key")
    permit2.release(resil.SUCCESS)
    data: bytes = await fetch(3)
    more: bytes = await payments.acall(fetch, 2)
    return len(data) + len(more)


def limited(key: Optional[str]) -> bool:
    try:
        with payments.acquire(key):
            return False
    except resil.RateLimited as e:
        wait: float = e.retry_after
        return wait > 0
    except resil.Throttled as e:
        return e.status_code == 503
    except resil.Rejected as e:
        ra: Optional[float] = e.retry_after
        return ra is not None


receipt: Dict[str, object] = payments.call(charge, "4242", amount=3)
client = httpx.Client(transport=resil.httpx.ResilTransport(policy=payments), timeout=5)
print(pay("4242"), asyncio.run(main()), limited(None), receipt, client)
