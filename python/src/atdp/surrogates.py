"""Placeholders of masked text rendered as surrogate values of their type, for training.

The lake stores ``<PERSON_0123456789ab>`` (the ``tokenize`` action) or
``<PERSON#0123456789abcdef>`` (``hash``) where the agent saw a real value. A model trained on
that text learns to write placeholders it never meets in serving, so :func:`render` replaces
each one with a realistic fake value of its entity type: a name, a city, an e-mail address, a
phone number, a card number that passes Luhn, an IBAN that passes mod-97.

    from atdp.surrogates import render, surrogate

    render("acme", "Write to <EMAIL_ADDRESS_00aa11bb22cc>.")   # 'Write to rafael.zhang@example.org.'
    surrogate("acme", "<PERSON_0123456789ab>")                # 'Beatriz Andersen'

A surrogate is a function of the tenant and the placeholder only: the same placeholder gets
the same value in every step of a tenant, no vault key or original is needed, and nothing of
the original is in it. E-mail addresses and URL hosts are under ``example.com``/``.org``/
``.net``, phone numbers in ``555-0100``–``555-0199``, IPv4 addresses in the documentation
networks, and SSNs in areas 900–999 and groups 01–49 (issued as neither SSN nor ITIN), so
those are no one's values; cards start with the prefixes of published test cards. A name,
city, organization, IBAN or card can be a real one by chance, as any fake value can. No surrogate holds ``"``, ``\\``, ``<``
or ``>``: tool-call arguments stay valid JSON.

The Rust trainer (``trainer/src/data/surrogate.rs``) computes the same surrogates with the
same algorithm from the same word lists (``surrogates.json``, next to this file); its tests
check that both agree. Version 1 of the algorithm: ``seed = SHA-256("atdp-surrogate/1" ‖ 0 ‖
tenant ‖ 0 ‖ placeholder)``; a byte stream ``SHA-256(seed ‖ k)`` for ``k = 0, 1, …`` (4 bytes,
big endian); ``draw(n)`` = the stream's next 8 bytes as a big-endian integer, modulo ``n``.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, MutableMapping

__all__ = ["PLACEHOLDER", "render", "render_step", "surrogate"]

#: A placeholder of the ``tokenize`` (``_`` + 12 hex digits) or ``hash`` (``#`` + 16) action.
PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]*)(?:_[0-9a-f]{12}|#[0-9a-f]{16})>")

_DOMAIN = b"atdp-surrogate/1"
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


@lru_cache(maxsize=1)
def _lists() -> dict[str, Any]:
    lists: dict[str, Any] = json.loads((Path(__file__).parent / "surrogates.json").read_text("utf-8"))
    if lists.get("version") != 1:
        raise ValueError(f"surrogates.json: version {lists.get('version')} is not 1")
    return lists


class _Draw:
    """The deterministic stream of choices behind one surrogate."""

    def __init__(self, tenant: str, placeholder: str) -> None:
        self.seed = hashlib.sha256(
            _DOMAIN + b"\0" + tenant.encode() + b"\0" + placeholder.encode()
        ).digest()
        self.block = b""
        self.counter = 0
        self.used = 32

    def next_u64(self) -> int:
        if self.used + 8 > 32:
            self.block = hashlib.sha256(self.seed + self.counter.to_bytes(4, "big")).digest()
            self.counter += 1
            self.used = 0
        value = int.from_bytes(self.block[self.used : self.used + 8], "big")
        self.used += 8
        return value

    def below(self, n: int) -> int:
        return self.next_u64() % max(n, 1)

    def pick(self, items: list[str]) -> str:
        return items[self.below(len(items))]

    def digits(self, n: int) -> str:
        return "".join(str(self.below(10)) for _ in range(n))

    def alnum(self, n: int) -> str:
        return "".join(_ALNUM[self.below(len(_ALNUM))] for _ in range(n))

    def value(self, entity: str) -> str:
        """The surrogate of an ``entity``, its parts drawn in the order the Rust side draws
        them."""
        lists = _lists()
        if entity == "PERSON":
            given = self.pick(lists["given_names"])
            family = self.pick(lists["family_names"])
            return f"{given} {family}"
        if entity == "LOCATION":
            return self.pick(lists["cities"])
        if entity in ("ADDRESS", "STREET_ADDRESS"):
            number = 1 + self.below(9999)
            street = self.pick(lists["streets"])
            kind = self.pick(lists["street_kinds"])
            city = self.pick(lists["cities"])
            return f"{number} {street} {kind}, {city}"
        if entity == "ORGANIZATION":
            word = self.pick(lists["organization_words"])
            suffix = self.pick(lists["organization_suffixes"])
            return f"{word} {suffix}"
        if entity == "EMAIL_ADDRESS":
            given = self.pick(lists["given_names"]).lower()
            family = self.pick(lists["family_names"]).lower()
            domain = self.pick(lists["email_domains"])
            return f"{given}.{family}@{domain}"
        if entity == "PHONE_NUMBER":
            area = self.pick(lists["phone_area_codes"])
            line = self.digits(2)
            return f"+1 ({area}) 555-01{line}"
        if entity == "CREDIT_CARD":
            prefix = self.pick(lists["card_prefixes"])
            body = prefix + self.digits(max(15 - len(prefix), 0))
            return _grouped(body + str(_luhn_check_digit(body)))
        if entity == "IBAN_CODE":
            formats: Mapping[str, str] = lists["iban_formats"]
            countries = sorted(formats)
            country = countries[self.below(len(countries))]
            bban = "".join(
                chr(ord("A") + self.below(26)) if c == "a" else chr(ord("0") + self.below(10))
                for c in formats[country]
            )
            check = 98 - _mod97(f"{bban}{country}00")
            return _grouped(f"{country}{check:02d}{bban}")
        if entity == "US_SSN":
            ssn_area = 900 + self.below(100)
            group = 1 + self.below(49)
            serial = 1 + self.below(9999)
            return f"{ssn_area}-{group:02d}-{serial:04d}"
        if entity == "IP_ADDRESS":
            network = self.pick(lists["ip_prefixes"])
            last = 1 + self.below(254)
            return f"{network}.{last}"
        if entity == "URL":
            scheme = self.pick(lists["url_schemes"])
            user = self.pick(lists["given_names"]).lower()
            password = self.alnum(16)
            host = self.pick(lists["host_words"])
            domain = self.pick(lists["email_domains"])
            return f"{scheme}://{user}:{password}@{host}.{domain}"
        if entity == "SECRET":
            return self.alnum(32)
        word = self.pick(lists["code_words"])
        code = self.digits(4)
        return f"{word}-{code}"


def _grouped(text: str) -> str:
    return " ".join(text[i : i + 4] for i in range(0, len(text), 4))


def _luhn_check_digit(digits: str) -> int:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return (10 - total % 10) % 10


def _mod97(text: str) -> int:
    rest = 0
    for c in text:
        v = int(c, 36)
        rest = (rest * (100 if v >= 10 else 10) + v) % 97
    return rest


def surrogate(tenant: str, placeholder: str) -> str | None:
    """The surrogate of one placeholder for ``tenant``; None when it is not one."""
    match = PLACEHOLDER.fullmatch(placeholder)
    if match is None:
        return None
    return _Draw(tenant, placeholder).value(match.group(1))


def render(tenant: str, text: str) -> str:
    """``text`` with every placeholder replaced by its surrogate for ``tenant``."""
    return PLACEHOLDER.sub(lambda m: _Draw(tenant, m.group(0)).value(m.group(1)), text)


def _render_message(tenant: str, message: MutableMapping[str, Any]) -> bool:
    """Renders a message's content and tool-call arguments in place; whether any held a
    placeholder."""
    changed = False
    if message.get("content") is not None:
        rendered = render(tenant, message["content"])
        changed |= rendered != message["content"]
        message["content"] = rendered
    for call in message.get("tool_calls") or []:
        if call.get("arguments") is not None:
            rendered = render(tenant, call["arguments"])
            changed |= rendered != call["arguments"]
            call["arguments"] = rendered
    return changed


def render_step(step: MutableMapping[str, Any]) -> None:
    """Renders, in place, the placeholders of every text a step's training example is made
    of (a ``steps`` row as a dict): the content and tool-call arguments of its request
    messages and of its reply, and the descriptions of its tools, with the surrogates of the
    step's own tenant, as the Rust trainer does. When the reply held a placeholder, its
    ``completion_token_ids`` and ``completion_logprobs`` are set to None: they are of another
    text than the rendered reply."""
    tenant = step["tenant_id"]
    for message in step.get("request_messages") or []:
        _render_message(tenant, message)
    reply = step.get("response_message")
    if reply is not None and _render_message(tenant, reply):
        step["completion_token_ids"] = None
        step["completion_logprobs"] = None
    for tool in step.get("tools") or []:
        if tool.get("description") is not None:
            tool["description"] = render(tenant, tool["description"])
