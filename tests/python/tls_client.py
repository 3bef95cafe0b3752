"""The official SDKs over HTTPS against atdp-proxy's TLS listener, and one connection kept
open across a certificate reload.

    tls_client.py sdk BASE_URL CA_FILE           # openai and anthropic, plain and streamed
    tls_client.py hold BASE_URL CA_FILE          # opens a connection, calls, waits for a line
                                                 # on stdin, calls again on the same connection

Prints one JSON line: what each call returned and, for `hold`, the certificate each call's
connection was made with (SHA-256 of its DER).
"""

import hashlib
import http.client
import json
import ssl
import sys

KEY = "sk-atdp-demo-agent"
CHAT = {"model": "gpt-4.1-mini", "messages": [{"role": "user", "content": "mail jane@example.com"}]}


def sdk(base_url: str, ca_file: str) -> dict:
    import anthropic
    import openai

    out: dict = {}
    client = openai.OpenAI(
        base_url=f"{base_url}/v1",
        api_key=KEY,
        max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=ca_file, trust_env=False),
    )
    reply = client.chat.completions.create(**CHAT)
    out["openai"] = reply.choices[0].message.content
    stream = client.chat.completions.create(**CHAT, stream=True)
    out["openai_stream"] = "".join(
        chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices
    )
    claude = anthropic.Anthropic(
        base_url=base_url,
        api_key=KEY,
        max_retries=0,
        http_client=anthropic.DefaultHttpxClient(verify=ca_file, trust_env=False),
    )
    message = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=64,
        messages=[{"role": "user", "content": "mail jane@example.com"}],
    )
    out["anthropic"] = "".join(block.text for block in message.content if block.type == "text")
    return out


def hold(base_url: str, ca_file: str) -> dict:
    host, port = base_url.removeprefix("https://").split(":")
    context = ssl.create_default_context(cafile=ca_file)
    connection = http.client.HTTPSConnection(host, int(port), context=context)
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}

    def call() -> dict:
        connection.request("POST", "/v1/chat/completions", json.dumps(CHAT), headers)
        response = connection.getresponse()
        response.read()
        der = connection.sock.getpeercert(binary_form=True)
        return {"status": response.status, "cert": hashlib.sha256(der).hexdigest()}

    before = call()
    print("ready", flush=True)
    sys.stdin.readline()
    after = call()
    return {"before": before, "after": after}


if __name__ == "__main__":
    mode, base_url, ca_file = sys.argv[1:4]
    result = sdk(base_url, ca_file) if mode == "sdk" else hold(base_url, ca_file)
    print(json.dumps(result), flush=True)
