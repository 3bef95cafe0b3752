"""moto's S3 server with create-only and compare-and-swap writes made atomic.

moto checks `If-None-Match: *` and `If-Match` on PutObject, and `If-None-Match` on
CompleteMultipartUpload, then stores the object in a later step, while its server handles
requests on several threads: two writers racing for the same Delta log entry can both pass the
check, and the second write replaces the first. Real S3 decides the condition and the write
as one step. This launcher holds one lock across each of those requests, so the object-store
tests see S3's semantics, then runs moto's own server with the given arguments.

    python tests/python/moto_server.py -H 127.0.0.1 -p 5000
"""

import functools
import threading

from moto import server
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
    server.main()
