import pytest
from pydantic import ValidationError

from agent_memory.platforms.agora.payloads import AgentHistory, Envelope, MemoryMessage, to_ms


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (1678901234, 1678901234000),  # seconds, as the docs' examples
        (1678901234567, 1678901234567),  # milliseconds, as the docs say
        (1678901234567890, 1678901234568),  # microseconds
        (1678901234.5, 1678901234500),  # fractional seconds
        ("1678901234", 1678901234000),
        (None, None),
        ("", None),
        ("soon", None),
        (-5, None),
        (True, None),
    ],
)
def test_timestamps_normalise_to_milliseconds_by_magnitude(raw, expected):
    assert to_ms(raw) == expected


def test_only_role_and_content_are_required_and_unknown_fields_are_kept():
    message = MemoryMessage.model_validate(
        {"role": "assistant", "content": "hi", "emotion": "warm", "metadata": {"source": "llm", "voice": "x"}}
    )
    assert message.turn_id is None and message.timestamp is None
    assert message.model_extra == {"emotion": "warm"}
    assert message.metadata.model_extra == {"voice": "x"}
    assert message.metadata.interrupted is False


def test_message_requires_a_role_and_content_is_optional():
    with pytest.raises(ValidationError):
        MemoryMessage.model_validate({"content": "no role"})
    with pytest.raises(ValidationError):
        MemoryMessage.model_validate({"role": " ", "content": "blank role"})
    # Agora's SDK marks content optional: a turn without it is an empty turn.
    assert MemoryMessage.model_validate({"role": "user"}).content == ""


def test_interrupted_reply_keeps_what_was_heard_and_what_was_meant():
    message = MemoryMessage.model_validate(
        {
            "role": "assistant",
            "content": "Why did the scarecrow ",
            "turn_id": "2",
            "timestamp": 1678901236,
            "metadata": {
                "interrupted": "true",
                "interrupt_timestamp": 1678905225,
                "original": "Why did the scarecrow win an award?",
                "source": "llm failure",
                "user": 1001,
            },
        }
    )
    assert message.turn_id == 2
    assert message.timestamp == 1678901236000
    assert message.metadata.interrupted is True
    assert message.metadata.interrupt_timestamp == 1678905225000
    assert message.metadata.original == "Why did the scarecrow win an award?"
    assert message.metadata.source == "llm failure"  # unknown values are kept
    assert message.metadata.user == "1001"


def test_null_or_parts_content_is_text():
    assert MemoryMessage(role="user", content=None).content == ""  # type: ignore[arg-type]
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert MemoryMessage.model_validate({"role": "user", "content": parts}).content == "ab"


def test_history_payload_times_and_labels():
    event = AgentHistory.model_validate(
        {
            "agent_id": "A",
            "start_ts": 1715000000,
            "stop_ts": 1715000060000,
            "labels": {"user_id": 7},
            "contents": None,
            "future_field": 1,
        }
    )
    assert (event.start_ms, event.stop_ms) == (1715000000000, 1715000060000)
    assert event.labels == {"user_id": "7"}
    assert event.contents == []
    assert event.model_extra == {"future_field": 1}


def test_envelope_keeps_unknown_event_types_and_fields():
    envelope = Envelope.model_validate(
        {"noticeId": 123, "eventType": 999, "notifyMs": 1611566412, "payload": None, "extra": True}
    )
    assert envelope.noticeId == "123"
    assert envelope.notifyMs == 1611566412000
    assert envelope.payload == {}
    assert envelope.model_extra == {"extra": True}
    with pytest.raises(ValidationError):
        Envelope.model_validate({"eventType": 103})
