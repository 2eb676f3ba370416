"""The ``server`` marker and the tiers on tests that use the scripted server: marked before they start
one, the tier following the fixtures, a pooled server answering from reloaded rules."""


def test_a_test_using_the_scripted_factory_is_marked_even_before_it_starts_one(request, scripted):
    assert request.node.get_closest_marker("server") is not None


def test_the_tier_follows_the_fixtures_a_test_uses(request, scripted):
    from conftest import tier

    assert tier(request.node) == "contract"
    assert all(tier(item) == "e2e" for item in request.session.items if "embedded" in item.fixturenames)


def test_a_pooled_scripted_server_answers_from_reloaded_rules_with_fresh_counters(scripted, tmp_path):
    """``scripted`` reuses this worker's idle servers (``POST /scripted/reload``): a reload must leave
    nothing of the last test behind: rules, ``times`` counters, provider, request log."""
    import json
    import urllib.error
    import urllib.request

    from conftest import _reload

    def say(server, **extra) -> tuple[int, str]:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}], **extra}).encode()
        request = urllib.request.Request(f"{server.base_url}/chat/completions", body, {"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request) as resp:
                return resp.status, json.loads(resp.read())["choices"][0]["message"]["content"]
        except urllib.error.HTTPError as refused:
            return refused.code, ""

    rules = [{"match": "go", "reply": "first", "times": 1}, {"match": "", "reply": "later"}]
    server = scripted(rules, {"models": ["m"]})
    assert [say(server), say(server), say(server, model="other")] == [(200, "first"), (200, "later"), (404, "")]
    _reload(server, rules, None, tmp_path / "next.jsonl")
    assert [say(server), say(server, model="other")] == [(200, "first"), (200, "later")]
    assert len(server.request_log.read_text().splitlines()) == 3 and len((tmp_path / "next.jsonl").read_text().splitlines()) == 2
