"""ci_output: the NDJSON items of an execution stream, as the E2B code interpreter SDKs
read them (`POST /execute`, one JSON object per line), and the writer that sends them.

Item types: stdout, stderr (text, timestamp), result (one key per format plus
is_main_result), error (name, value, traceback), number_of_executions
(execution_count), end_of_execution (last line of a finished stream) and keepalive
(ignored by the SDKs; written while a cell is silent so that a client which went away is
noticed by the failing write, and the cell interrupted).
"""
import datetime
import json
import time

# Jupyter MIME type -> the key the SDKs read. Anything else goes under "extra".
MIME_KEYS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}

KEEPALIVE_S = 1.0


class Disconnected(Exception):
    """The client's connection failed while an execution was streaming."""


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def log_item(name, text, when=None):
    """stdout or stderr text of a cell."""
    return {"type": name, "text": text, "timestamp": when or now_iso()}


def error_item(name, value, traceback=""):
    return {"type": "error", "name": name, "value": value, "traceback": traceback}


def count_item(n):
    return {"type": "number_of_executions", "execution_count": n}


def result_item(data, is_main):
    """A display_data / execute_result bundle as a result item. The text of a quoted
    string repr loses its quotes, as E2B's server does ('abc' -> abc)."""
    item = {"type": "result", "is_main_result": is_main}
    extra = {}
    for mime, value in data.items():
        key = MIME_KEYS.get(mime)
        if key is None:
            extra[mime] = value
        else:
            item[key] = value
    text = item.get("text")
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        item["text"] = text[1:-1]
    if extra:
        item["extra"] = extra
    return item


class Stream:
    """Writes items to a chunked HTTP response body. A failed write raises Disconnected
    (and so does every later one): the caller interrupts the cell."""

    def __init__(self, wfile):
        self.wfile = wfile
        self.last = time.monotonic()
        self.gone = False

    def emit(self, item):
        self._write((json.dumps(item) + "\n").encode())

    def keepalive(self):
        if time.monotonic() - self.last >= KEEPALIVE_S:
            self.emit({"type": "keepalive"})

    def finish(self):
        self.emit({"type": "end_of_execution"})
        self._write(b"")

    def _write(self, data):
        if self.gone:
            raise Disconnected()
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError as e:
            self.gone = True
            raise Disconnected() from e
        self.last = time.monotonic()


class Discard:
    """A stream nobody reads: used while draining an interrupted cell."""

    def emit(self, item):
        pass

    def keepalive(self):
        pass
