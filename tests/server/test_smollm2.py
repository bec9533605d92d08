"""The real default model (SmolLM2-135M-Instruct) behind the server, with the official client:
real text, identical to the offline API's greedy text."""

from __future__ import annotations

from pathlib import Path

import openai
from server_kit import LiveServer, make_engine

from updraft.llm import LLM
from updraft.sampling_params import SamplingParams

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def test_smollm2_chat_with_the_openai_client(smollm2_gguf: Path) -> None:
    engine = make_engine(smollm2_gguf, dtype="float32")
    # The offline API first, on the same engine (the server takes it over afterwards).
    want = (
        LLM(engine=engine)
        .chat(MESSAGES, SamplingParams(temperature=0, max_tokens=32))[0]
        .outputs[0]
    )
    server = LiveServer(engine, served_model_name="smollm2")
    try:
        client = openai.OpenAI(
            base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=120
        )
        r = client.chat.completions.create(
            model="smollm2", messages=MESSAGES, max_tokens=32, temperature=0
        )
        text = r.choices[0].message.content
        assert text == want.text
        assert "Paris" in text
        stream = client.chat.completions.create(
            model="smollm2", messages=MESSAGES, max_tokens=32, temperature=0, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text
        client.close()
    finally:
        server.close()
