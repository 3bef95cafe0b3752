"""moto's S3 server with create-only and compare-and-swap writes made atomic.

moto checks `If-None-Match: *` and `If-Match` on PutObject, and `If-None-Match` on
CompleteMultipartUpload, then stores the object in a later step, while its server handles
requests on several threads: two writers racing for the same Delta log entry can both pass the
check, and the second write replaces the first. Real S3 decides the condition and the write
as one step. This launcher holds one lock across each of those requests, so the object-store
tests see S3's semantics, then runs moto's threaded server on loopback.

    python tests/python/moto_server.py [--port 0]

Binds 127.0.0.1 (port 0: a free one), prints one line `{"port": N}` on stdout, then serves
until killed.
"""

import argparse
import functools
import json
import logging
import threading

from moto.server import ThreadedMotoServer
from moto.s3.responses import S3Response

_WRITE = threading.Lock()


def _atomic(method):
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with _WRITE:
            return method(self, *args, **kwargs)

    return locked


S3Response.put_object = _atomic(S3Response.put_object)
S3Response._key_response_post = _atomic(S3Response._key_response_post)

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    # One line per request on stderr would bury the tests' own output.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=args.port, verbose=False)
    moto.start()
    print(json.dumps({"port": moto.get_host_and_port()[1]}), flush=True)
    threading.Event().wait()
