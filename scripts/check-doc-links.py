#!/usr/bin/env python3
"""Checks the relative links of Markdown files: each names a file that
exists and, with #anchor, a heading of that file (GitHub's anchors: the
heading in lower case, punctuation but - and _ dropped, spaces as -).
Links in code blocks and to URLs (http:, https:, mailto:) are not checked.

Usage: check-doc-links.py FILE.md ...   Exit codes: 0 all resolve, 1 not.
"""
import os
import re
import sys


def slug(heading):
    heading = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return heading.replace(" ", "-")


def anchors(path):
    out, inside = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            inside = not inside
        elif not inside and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def main(files):
    bad = 0
    for md in files:
        text = re.sub(r"```.*?```", "", open(md, encoding="utf-8").read(), flags=re.S)
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            link = m.group(1)
            if re.match(r"[a-z]+:", link):
                continue
            path, _, frag = link.partition("#")
            target = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(target):
                print("%s: the link %s names no file (%s)" % (md, link, target))
                bad += 1
            elif frag and target.endswith(".md") and frag not in anchors(target):
                print("%s: the link %s names no heading of %s" % (md, link, target))
                bad += 1
    print("check-doc-links: %d file(s), %d broken link(s)" % (len(files), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
