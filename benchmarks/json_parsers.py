"""The proxy's JSON reading and writing: the standard library against ``orjson`` and ``msgspec``.

    python benchmarks/json_parsers.py           # 201-message bodies of the three APIs, and 2,001
    python benchmarks/json_parsers.py --quick   # fewer repetitions

Each request the proxy takes is parsed once (``strict_loads``: ``json.loads`` with the checks that
keep what it read writable again) and, when it compacted, written once.  This measures, on the
bodies ``benchmarks/serve.py`` sends (the same conversation as chat completions, Responses API
input and Messages API messages), the median time to parse and to write with each library, in the
same process, with ``json.loads`` as the baseline.  It also asks each parser the questions
``strict_loads`` answers (a key named twice, ``NaN``, a number out of range, a lone surrogate,
nesting past 128 levels): a parser that takes one of them would need the check added back.
``orjson`` and ``msgspec`` are measured when installed (``pip install orjson msgspec``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from contextledger import from_openai
from contextledger._json import strict_loads
from contextledger.messages import to_anthropic, to_responses
from workloads import messages

PROBES = {
    "a key named twice": b'{"a": 1, "a": 2}',
    "NaN": b'{"a": NaN}',
    "1e400": b'{"a": 1e400}',
    "a lone surrogate": b'{"a": "\\ud800"}',
    "nesting 200 deep": b"[" * 200 + b"]" * 200,
}


def bodies(count: int) -> dict[str, bytes]:
    history = messages(count)
    system, written = to_anthropic(from_openai(history))
    return {
        "chat": json.dumps({"model": "bench", "messages": history}).encode(),
        "responses": json.dumps({"model": "bench", "input": to_responses(from_openai(history))}).encode(),
        "messages": json.dumps({"model": "bench", "max_tokens": 64, "system": system, "messages": written}).encode(),
    }


def parsers() -> dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]]:
    found: dict[str, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]] = {
        "json": (json.loads, lambda value: json.dumps(value, ensure_ascii=False).encode("utf-8")),
        "strict_loads": (strict_loads, lambda value: json.dumps(value, ensure_ascii=False).encode("utf-8")),
    }
    try:
        import orjson  # noqa: PLC0415  (measured when installed)

        found["orjson"] = (orjson.loads, orjson.dumps)
    except ModuleNotFoundError:
        pass
    try:
        import msgspec  # noqa: PLC0415

        found["msgspec"] = (msgspec.json.decode, msgspec.json.encode)
    except ModuleNotFoundError:
        pass
    return found


def bound(action: Callable[[Any], object], argument: Any) -> Callable[[], object]:
    return lambda: action(argument)


def median_ms(action: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def takes(parse: Callable[[bytes], Any], probe: bytes) -> bool:
    try:
        parse(probe)
    except (ValueError, RecursionError, TypeError):
        return False
    except Exception as error:  # each library raises its own error type
        return "Decode" not in type(error).__name__ and "Validation" not in type(error).__name__
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args(argv)
    repeat = 20 if args.quick else 200
    found = parsers()
    print(f"python {sys.version.split()[0]}; median of {repeat} runs, ms; ratio against json.loads / json.dumps")
    print(f"{'body':24} {'bytes':>9} " + " ".join(f"{name + ' parse':>19} {'write':>13}" for name in found))
    for count in (201, 2_001):
        for api, body in bodies(count).items():
            value = json.loads(body)
            base_parse = median_ms(bound(json.loads, body), repeat)
            base_write = median_ms(bound(found["json"][1], value), repeat)
            cells = []
            for load, dump in found.values():
                parse_ms = median_ms(bound(load, body), repeat)
                write_ms = median_ms(bound(dump, value), repeat)
                cells.append(
                    f"{parse_ms:>9.3f} ({parse_ms / base_parse:4.2f}x) {write_ms:>6.3f} ({write_ms / base_write:4.2f}x)"
                )
            print(f"{f'{api}, {count} messages':24} {len(body):>9,} " + " ".join(cells))
    print("\nWhat each parser takes that strict_loads refuses (yes: the check would have to be added back)")
    print(f"{'input':20} " + " ".join(f"{name:>13}" for name in found))
    for what, probe in PROBES.items():
        answers = ("yes" if takes(load, probe) else "refused" for load, _ in found.values())
        print(f"{what:20} " + " ".join(f"{answer:>13}" for answer in answers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
