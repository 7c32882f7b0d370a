from conftest import agent_event, turns


async def test_signed_103_is_stored_and_rendered(service):
    status, body = await service.callback(
        agent_event(103, "A1", labels={"user_id": "u1", "character_id": "c1"}, contents=turns(4))
    )
    assert (status, body["code"], body["new_messages"]) == (200, 0, 4)
    status, body = await service.api("GET", "/v1/users/u1/characters/c1/system-messages")
    assert status == 200
    assert "user line 2" in body["system_messages"][-1]["content"]
