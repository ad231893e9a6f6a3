"""Dataset files: each format loads into conversations, unusable entries are skipped and counted,
and a bad file is one line naming the file and the line or entry."""

from __future__ import annotations

import base64
import json

import pytest

from vllm_load.user_values import SettingsError
from vllm_load.workload.datasets import Conversation, Turn, load_dataset


def write_jsonl(tmp_path, entries, name="data.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in entries))
    return str(path)


def write_json(tmp_path, data, name="data.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return str(path)


def test_jsonl_prompts(tmp_path):
    path = write_jsonl(
        tmp_path,
        [
            {"prompt": "Hello there", "output_tokens": 128},
            {"prompt": "No length"},
            {"prompt": "Via max_tokens", "max_tokens": 64, "system": "Be brief.", "id": "x"},
            {"prompt": "null length", "output_tokens": None},
        ],
    )
    dataset = load_dataset(path)
    assert dataset.path == path and dataset.skipped == 0
    assert dataset.conversations == (
        Conversation("1", None, (Turn("Hello there", None, 128),)),
        Conversation("2", None, (Turn("No length"),)),
        Conversation("x", "Be brief.", (Turn("Via max_tokens", None, 64),)),
        Conversation("4", None, (Turn("null length"),)),
    )


def test_jsonl_messages_make_turns(tmp_path):
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "reply one"},
        {"role": "user", "content": [{"type": "text", "text": "two"}]},
        {"role": "assistant", "content": "reply two"},
        {"role": "user", "content": "three"},
    ]
    dataset = load_dataset(write_jsonl(tmp_path, [{"messages": messages, "output_tokens": 50}]))
    (conversation,) = dataset.conversations
    assert conversation.system == "You are terse."
    assert conversation.turns == (
        Turn("one", "reply one", 50),
        Turn("two", "reply two", 50),
        Turn("three", None, 50),
    )


def test_consecutive_messages_of_one_role_are_joined(tmp_path):
    messages = [
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
        {"role": "assistant", "content": "d"},
    ]
    dataset = load_dataset(write_jsonl(tmp_path, [{"messages": messages}]))
    assert dataset.conversations[0].turns == (Turn("a\n\nb", "c\n\nd"),)


def test_sharegpt(tmp_path):
    data = [
        {
            "id": "abc_0",
            "conversations": [
                {"from": "system", "value": "sys"},
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "hello"},
                {"from": "human", "value": "more"},
                {"from": "gpt", "value": "sure"},
            ],
        },
        {"id": "only_human", "conversations": [{"from": "human", "value": "alone"}]},
        {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "   "}]},
    ]
    dataset = load_dataset(write_json(tmp_path, data))
    assert dataset.conversations == (
        Conversation("abc_0", "sys", (Turn("hi", "hello"), Turn("more", "sure"))),
        Conversation("only_human", None, (Turn("alone"),)),
        Conversation("2", None, (Turn("q"),)),  # a blank reply is no reply
    )


def test_sharegpt_as_jsonl_and_a_byte_order_mark(tmp_path):
    entry = {"id": "a", "conversations": [{"from": "human", "value": "hi"}]}
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(entry).encode() + b"\n\n")
    assert load_dataset(path).conversations == (Conversation("a", None, (Turn("hi"),)),)


def test_unusable_entries_are_skipped_and_counted(tmp_path):
    human, gpt = "human", "gpt"
    data = [
        {"conversations": [{"from": human, "value": "fine"}, {"from": gpt, "value": "ok"}]},
        {"conversations": [{"from": gpt, "value": "I start"}, {"from": human, "value": "no"}]},
        {"conversations": [{"from": human, "value": "  "}, {"from": gpt, "value": "x"}]},
        {"conversations": []},
        {"conversations": [{"from": "system", "value": "only a system prompt"}]},
        {"conversations": [{"from": "tool", "value": "?"}]},
        {"conversations": [{"from": human, "value": "a"}, {"from": "system", "value": "b"}]},
        {"prompt": ""},
    ]
    dataset = load_dataset(write_json(tmp_path, data))
    assert [c.id for c in dataset.conversations] == ["0"]
    assert dataset.skip_reasons == {
        "starts with the assistant": 1,
        "empty user message": 2,
        "no user message": 2,
        "speaker 'tool'": 1,
        "system message after the start": 1,
    }
    assert dataset.skipped == 7
    line = dataset.describe()
    assert "\n" not in line
    assert "1 conversations (1 turns), 7 skipped (" in line and "2 empty user message" in line


@pytest.mark.parametrize(
    "lines, where, says",
    [
        (['{"prompt": "a"}', "{not json"], ":2: ", "not valid JSON"),
        (
            ['{"prompt": "a"}', "", '["a list"]'],
            ":3: ",
            "an entry must be a JSON object, got a list",
        ),
        (['{"text": "a"}'], ":1: ", 'needs "prompt", "messages" or "conversations"'),
        (['{"prompt": 5}'], ":1: ", '"prompt" must be a string, got int'),
        (['{"prompt": "a", "output_tokens": 0}'], ":1: ", '"output_tokens" must be a whole'),
        (['{"prompt": "a", "max_tokens": "9"}'], ":1: ", '"max_tokens" must be a whole'),
        (['{"prompt": "a", "output_tokens": true}'], ":1: ", '"output_tokens" must be a whole'),
        (['{"prompt": "a", "id": [1]}'], ":1: ", '"id" must be a string or a number'),
        (['{"messages": {"role": "user"}}'], ":1: ", '"messages" must be a list, got an object'),
        (['{"messages": [{"content": "a"}]}'], ":1: ", '"messages"[0] must be an object with'),
        (['{"messages": [{"role": "user", "content": 3}]}'], ":1: ", "a string or a list of parts"),
    ],
)
def test_a_bad_jsonl_line_is_named(tmp_path, lines, where, says):
    path = write_jsonl(tmp_path, lines)
    with pytest.raises(SettingsError) as error:
        load_dataset(path)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(path + where)
    assert says in message


def test_a_bad_json_array_entry_is_named(tmp_path):
    ok = {"conversations": [{"from": "human", "value": "a"}]}
    bad = {"conversations": [{"from": "human", "value": None}]}
    path = write_json(tmp_path, [ok, ok, bad])
    with pytest.raises(SettingsError, match=r'entry \[2\]: "conversations"\[0\]\["value"\] must'):
        load_dataset(path)


def test_broken_json_array_names_its_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"conversations": []},\n  {"conversations": [}\n]\n')
    with pytest.raises(SettingsError, match=r"broken\.json:3: not valid JSON: .*column"):
        load_dataset(path)


def test_a_json_value_that_is_not_an_array_of_entries(tmp_path):
    path = tmp_path / "obj.json"
    path.write_text('["x"]')
    with pytest.raises(SettingsError, match=r"obj\.json: entry \[0\]: an entry must be"):
        load_dataset(path)


@pytest.mark.parametrize(
    "content, says",
    [
        ("", "no usable entry (empty)"),
        ("\n\n", "no usable entry (empty)"),
        ("[]", "no usable entry (empty)"),
        ('{"prompt": " "}\n{"prompt": ""}\n', "no usable entry (2 empty user message)"),
    ],
)
def test_nothing_usable_is_an_error(tmp_path, content, says):
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(SettingsError) as error:
        load_dataset(path)
    assert str(error.value) == f"dataset {path}: {says}"


def test_a_missing_file(tmp_path):
    with pytest.raises(SettingsError, match=r"^dataset .*nope\.jsonl: No such file"):
        load_dataset(tmp_path / "nope.jsonl")


def test_turns_carry_their_images(tmp_path):
    (tmp_path / "pics").mkdir()
    (tmp_path / "pics" / "cat.png").write_bytes(b"\x89PNG-cat")
    (tmp_path / "dog.jpeg").write_bytes(b"\xff\xd8-dog")
    cat = "data:image/png;base64," + base64.b64encode(b"\x89PNG-cat").decode()
    dog = "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8-dog").decode()
    web = "https://example.com/bird.webp"
    part = {"type": "image_url", "image_url": {"url": web}}
    path = write_jsonl(
        tmp_path,
        [
            {"prompt": "What is this?", "images": ["pics/cat.png", web], "id": "p"},
            {
                "id": "m",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "look"}, part]},
                    {"role": "assistant", "content": "a bird"},
                    {"role": "user", "content": "and these?", "images": ["dog.jpeg"]},
                    {"role": "user", "content": "", "images": ["pics/cat.png"]},
                ],
            },
            {
                "id": "s",
                "images": ["dog.jpeg"],  # the entry's: its first user message's
                "conversations": [
                    {"from": "human", "value": "describe"},
                    {"from": "gpt", "value": "a dog"},
                    {"from": "human", "value": "again"},
                ],
            },
            {"id": "i", "prompt": "", "images": [web]},  # an image alone is a question too
        ],
    )
    dataset = load_dataset(path)
    assert dataset.skipped == 0
    assert dataset.conversations == (
        Conversation("p", None, (Turn("What is this?", images=(cat, web)),)),
        Conversation(
            "m",
            None,
            (Turn("look", "a bird", images=(web,)), Turn("and these?\n\n", images=(dog, cat))),
        ),
        Conversation("s", None, (Turn("describe", "a dog", images=(dog,)), Turn("again"))),
        Conversation("i", None, (Turn("", images=(web,)),)),
    )


def test_an_image_that_cannot_be_sent_names_the_file_and_the_line(tmp_path):
    path = write_jsonl(
        tmp_path,
        [{"prompt": "fine"}, {"prompt": "where?", "images": ["gone.png"]}],
    )
    with pytest.raises(SettingsError) as e:
        load_dataset(path)
    assert str(e.value) == (
        f"{path}:2: image gone.png: No such file or directory ({tmp_path / 'gone.png'})"
    )
    array = write_json(tmp_path, [{"prompt": "x", "images": "a.png"}])
    with pytest.raises(SettingsError, match=r'entry \[0\]: "images" must be a list of image'):
        load_dataset(array)
    bad_part = {"role": "user", "content": [{"type": "image_url", "image_url": {}}]}
    with pytest.raises(SettingsError, match=r':1: "messages"\[0\]: an image_url part needs'):
        load_dataset(write_jsonl(tmp_path, [{"messages": [bad_part]}], name="parts.jsonl"))


def test_images_outside_user_messages_are_skipped(tmp_path):
    path = write_jsonl(
        tmp_path,
        [
            {"prompt": "kept"},
            {
                "messages": [
                    {"role": "system", "content": "x", "images": ["https://h/a.png"]},
                    {"role": "user", "content": "hi"},
                ]
            },
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "x", "images": ["https://h/a.png"]},
                ]
            },
        ],
    )
    dataset = load_dataset(path)
    assert dataset.skip_reasons == {
        "images in a system message": 1,
        "images in an assistant message": 1,
    }
