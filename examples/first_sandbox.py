#!/usr/bin/env python3
"""Your first sandbox: create one, run a command in it, move a file in and out, delete it.

Run it right after `make run` (as root, so the admin key in /var/lib/space/admin.key is
readable), or set SPACE_URL / SPACE_API_KEY:

    python3 examples/first_sandbox.py
"""
import os
import sys

try:
    import space
except ImportError:  # not installed: use the client from this checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
    import space


def main():
    template = os.environ.get("SPACE_TEMPLATE", "python")
    client = space.Client()
    print("creating a %r sandbox at %s ..." % (template, client.url))
    sbx = client.create(template=template)
    print("sandbox %s is %s" % (sbx.id, sbx.state))
    try:
        cmd = ["python3", "-c", "import platform; print('hello from', platform.node(), platform.release())"]
        result = sbx.run(cmd, on_stdout=lambda text: print(text, end="", flush=True),
                         on_stderr=lambda text: print(text, end="", file=sys.stderr, flush=True))
        print("exit code:", result.exit_code)

        sbx.write_file("/tmp/greeting.txt", "hello, sandbox\n")
        back = sbx.read_file("/tmp/greeting.txt")
        print("read back %d bytes: %r" % (len(back), back.decode()))
        assert back == b"hello, sandbox\n"
        return 0 if result.exit_code == 0 else 1
    finally:
        sbx.delete()
        print("sandbox %s deleted" % sbx.id)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except space.SpaceError as e:
        print("error:", e, file=sys.stderr)
        sys.exit(1)
