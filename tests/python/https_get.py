"""GET a URL over HTTPS, trusting only the given certificate, and print one JSON line:
{"status": N, "set_cookie": [...], "alpn": "..."} or {"error": "..."}.

    python tests/python/https_get.py --ca cert.pem https://127.0.0.1:PORT/login
"""

import argparse
import http.client
import json
import ssl
import urllib.parse


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ca", required=True)
    parser.add_argument("url")
    args = parser.parse_args()
    url = urllib.parse.urlsplit(args.url)
    context = ssl.create_default_context(cafile=args.ca)
    context.set_alpn_protocols(["h2", "http/1.1"])
    try:
        connection = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=10)
        connection.request("GET", url.path or "/")
        response = connection.getresponse()
        alpn = connection.sock.selected_alpn_protocol()
        print(
            json.dumps(
                {
                    "status": response.status,
                    "set_cookie": response.headers.get_all("set-cookie") or [],
                    "alpn": alpn,
                }
            )
        )
    except (OSError, ssl.SSLError, http.client.HTTPException) as error:
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))


if __name__ == "__main__":
    main()
