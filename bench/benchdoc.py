"""What the benchmark scripts share: their section of BENCHMARKS.md."""


def put_section(path, title, text, before=None):
    """Put text, a section that opens with "## title", into the Markdown
    file at path: in place of the section of that title if there is one,
    else before the section "## before" if given and there, else at the
    end."""
    doc = open(path).read()
    mark = "\n## %s\n" % title
    if mark in doc:
        head, rest = doc.split(mark, 1)
        tail = rest.split("\n## ", 1)
        doc = head + "\n" + text + ("\n## " + tail[1] if len(tail) > 1 else "")
    elif before and "\n## %s\n" % before in doc:
        head, rest = doc.split("\n## %s\n" % before, 1)
        doc = head + "\n" + text + "\n## %s\n" % before + rest
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(doc)
