"""A tiny shop backend handling three checkout requests, each a small tree of calls.

Plain Python, no tracer import. Run it as it is, or traced with no code change:

    python examples/shop.py
    tracer run examples/shop.py

Traced, each request is one invocation sequence rooted at ``handle_request``: authentication
(CPU), the cart's items fetched one by one (I/O, simulated by short sleeps), pricing, the card
charge (declined for the second customer: the error is recorded and handled) and the receipt.
The requests are handled from module-level code, so there is no traced ``main()`` that would make
the three requests one sequence.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    name: str
    price_cents: int


@dataclass(frozen=True)
class Request:
    user: str
    token: str
    items: tuple[str, ...]
    card: str
    coupon: str | None = None


class CardDeclinedError(Exception):
    pass


CATALOG = {"apple": 120, "pear": 95, "coffee": 1150, "mug": 800, "tea": 650}
COUPONS = {"WELCOME10": 0.10}
DECLINED_CARDS = {"4000000000000002"}


class Inventory:
    """Stock levels; reserving an item takes a (simulated) round trip to the warehouse."""

    def __init__(self) -> None:
        self.stock = dict.fromkeys(CATALOG, 10)

    def reserve(self, cart: list[Item]) -> None:
        time.sleep(0.001)
        for item in cart:
            self.stock[item.name] -= 1


INVENTORY = Inventory()


def handle_request(request: Request) -> str:
    user = authenticate(request.user, request.token)
    cart = load_cart(request.items)
    total = price_cart(cart, request.coupon)
    try:
        payment = charge_card(request.card, total)
    except CardDeclinedError as exc:
        return render_error(user, str(exc))
    INVENTORY.reserve(cart)
    return render_receipt(user, cart, total, payment)


def authenticate(user: str, token: str) -> str:
    if token_for(user) != token:
        raise PermissionError(f"bad token for {user}")
    return user


def token_for(user: str) -> str:
    """A deliberately slow key derivation: the CPU-bound part of a request."""
    return hashlib.pbkdf2_hmac("sha256", user.encode(), b"shop", 3000).hex()[:16]


def load_cart(names: tuple[str, ...]) -> list[Item]:
    return [fetch_item(name) for name in names]


def fetch_item(name: str) -> Item:
    time.sleep(0.002)  # the catalogue database
    return Item(name, CATALOG[name])


def price_cart(cart: list[Item], coupon: str | None) -> int:
    subtotal = sum(item.price_cents for item in cart)
    return apply_discounts(subtotal, coupon)


def apply_discounts(subtotal: int, coupon: str | None) -> int:
    rate = COUPONS.get(coupon or "", 0.0)
    return round(subtotal * (1 - rate))


def charge_card(card: str, amount_cents: int) -> str:
    time.sleep(0.004)  # the payment provider
    if card in DECLINED_CARDS:
        raise CardDeclinedError(f"card ending {card[-4:]} declined")
    return "pay-" + hashlib.sha256(f"{card}:{amount_cents}".encode()).hexdigest()[:8]


def render_receipt(user: str, cart: list[Item], total_cents: int, payment: str) -> str:
    lines = ", ".join(item.name for item in cart)
    return f"{user}: paid {total_cents / 100:.2f} for {lines} ({payment})"


def render_error(user: str, reason: str) -> str:
    return f"{user}: payment failed: {reason}"


REQUESTS = (
    Request("alice", "e147854c0bfac468", ("apple", "coffee", "mug"), "4242424242424242"),
    Request("bob", "98d9d3e08f0a269c", ("tea", "pear"), "4000000000000002"),
    Request(
        "carol", "6da6b795141f4c38", ("coffee",) * 4 + ("tea",), "5555555555554444", "WELCOME10"
    ),
)

if __name__ == "__main__":
    for request in REQUESTS:
        print(handle_request(request))
