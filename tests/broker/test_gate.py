"""The take-over gate: produce requests pass in the order they arrived, those read after
the take-over ended included (the race that made librdkafka fail a producer on S3)."""

from __future__ import annotations

import asyncio

from sparklog.broker.gate import TakeOverGate


async def _request(gate: TakeOverGate, name: str, order: list[str]) -> None:
    await gate.enter()
    order.append(name)  # its batch is appended here, holding the gate
    gate.leave()


def test_a_request_read_after_the_take_over_ended_passes_after_those_waiting() -> None:
    async def main() -> list[str]:
        gate, order = TakeOverGate(), []
        first = asyncio.create_task(_request(gate, "2656-2657", order))
        await asyncio.sleep(0)  # it waits for the take-over
        gate.open()  # installed; the first is woken, not yet running
        late = asyncio.create_task(_request(gate, "2658", order))
        await asyncio.gather(first, late)
        return order

    assert asyncio.run(main()) == ["2656-2657", "2658"]


def test_requests_waiting_for_a_take_over_pass_in_arrival_order() -> None:
    async def main() -> list[int]:
        gate, order = TakeOverGate(), []
        tasks = []
        for i in range(5):
            tasks.append(asyncio.create_task(_request(gate, str(i), order)))
            await asyncio.sleep(0)
        gate.open()
        tasks.append(asyncio.create_task(_request(gate, "5", order)))
        await asyncio.gather(*tasks)
        return [int(x) for x in order]

    assert asyncio.run(main()) == [0, 1, 2, 3, 4, 5]


def test_an_open_empty_gate_lets_a_request_through_at_once_and_is_idle_after() -> None:
    async def main() -> tuple[bool, bool]:
        gate = TakeOverGate()
        gate.open()
        entered = asyncio.get_running_loop().create_task(gate.enter())
        await asyncio.sleep(0)
        held = entered.done() and not gate.idle
        gate.leave()
        return held, gate.idle

    assert asyncio.run(main()) == (True, True)


def test_a_request_that_gave_up_waiting_does_not_hold_up_the_next() -> None:
    async def main() -> list[str]:
        gate, order = TakeOverGate(), []
        impatient = asyncio.create_task(gate.enter())
        patient = asyncio.create_task(_request(gate, "patient", order))
        await asyncio.sleep(0)
        impatient.cancel()  # its timeout
        await asyncio.sleep(0)
        gate.open()
        await asyncio.wait_for(patient, 5)
        return order

    assert asyncio.run(main()) == ["patient"]


def test_a_gate_closed_again_by_another_take_over_holds_new_requests() -> None:
    async def main() -> bool:
        gate = TakeOverGate()
        gate.open()
        gate.close()
        waiting = asyncio.create_task(gate.enter())
        await asyncio.sleep(0.05)
        still = not waiting.done()
        gate.open()
        await asyncio.wait_for(waiting, 5)
        gate.leave()
        return still and gate.idle

    assert asyncio.run(main())
