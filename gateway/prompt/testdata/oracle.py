#!/usr/bin/python3
"""Test oracle for gateway/prompt: renders chat templates with Python's jinja2 the way Hugging Face
transformers' apply_chat_template does (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks
and the loopcontrols extension; raise_exception and strftime_now globals; tojson as json.dumps with
ensure_ascii=False and key order kept).

stdin: a JSON list of {"source": template text, "vars": {name: value}}.
stdout: a JSON list of {"text": rendered} or {"error": message} (TemplateError raised by the template).
Needs Debian's python3-jinja2; nothing else.
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    env = environment()
    cases = json.load(sys.stdin)
    out = []
    compiled = {}
    for case in cases:
        src = case["source"]
        if src not in compiled:
            compiled[src] = env.from_string(src)
        try:
            out.append({"text": compiled[src].render(**case["vars"])})
        except TemplateError as e:
            out.append({"error": str(e)})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
