#!/usr/bin/env python3
"""Writes the seed corpus of the reader fuzzers (tests/fuzz/corpus/<fuzzer>/), valid and invalid
files alike. Deterministic; rerun after editing, then commit the files. No numpy needed."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def npy(descr="<f8", fortran=False, shape=(2, 3), values=None, version=(1, 0), pad=True,
        header=None, extra=b"", cut=0):
    if header is None:
        shape_txt = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
            descr, "True" if fortran else "False", shape_txt)
    h = header.encode("latin1")
    lenb = 2 if version[0] == 1 else 4
    if pad:
        total = 6 + 2 + lenb + len(h) + 1
        h += b" " * ((64 - total % 64) % 64) + b"\n"
    out = b"\x93NUMPY" + bytes(version) + (struct.pack("<H", len(h)) if lenb == 2
                                            else struct.pack("<I", len(h))) + h
    count = 1
    for d in shape:
        count *= d
    if values is None:
        values = [0.5 * i - 1 for i in range(count)]
    code = {"<f8": "<d", "<f4": "<f", ">f8": ">d", ">f4": ">f", "<i4": "<i", "|u1": "<B"}.get(descr, "<d")
    if code in ("<i", "<B"):
        values = [int(v) % 200 for v in values]
    out += b"".join(struct.pack(code, v) for v in values) + extra
    return out[:len(out) - cut] if cut else out


nan, inf = float("nan"), float("inf")
NPY = {
    "v1_f8_2x3.npy": npy(),
    "v1_f4_3x2.npy": npy("<f4", shape=(3, 2)),
    "v2_f8_2x2.npy": npy(shape=(2, 2), version=(2, 0)),
    "v3_f4_4x1.npy": npy("<f4", shape=(4, 1), version=(3, 0)),
    "fortran_order.npy": npy(fortran=True),
    "big_endian_f8.npy": npy(">f8"),
    "big_endian_f4.npy": npy(">f4", shape=(2, 2)),
    "int32.npy": npy("<i4", shape=(3, 1)),
    "vector_5.npy": npy(shape=(5,)),
    "row_1x4.npy": npy(shape=(1, 4)),
    "scalar.npy": npy(shape=()),
    "rank3.npy": npy(shape=(2, 1, 2)),
    "empty_0x3.npy": npy(shape=(0, 3)),
    "nan_inf.npy": npy(shape=(2, 2), values=[nan, inf, -inf, -0.0]),
    "truncated_data.npy": npy(cut=5),
    "extra_bytes.npy": npy(extra=b"\0\0\0"),
    "truncated_header.npy": npy()[:20],
    "bad_version.npy": npy(version=(4, 0)),
    "duplicate_key.npy": npy(header="{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", shape=(1,)),
    "structured.npy": npy(header="{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (1,), }", shape=(1,)),
    "python2_long.npy": npy(header="{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 1L), }", shape=(2, 1)),
    "huge_shape.npy": npy(header="{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", shape=()),
    "no_magic.npy": b"NUMPY\x01\x00",
    "empty.npy": b"",
}

CSV = {
    "plain_3x2.csv": b"0.5,1\n-2,3e-3\n4.25,1e10\n",
    "header.csv": b"x,y,z\n1,2,3\n4,5,6\n",
    "header_only.csv": b"x,y\n",
    "empty.csv": b"",
    "nan_inf.csv": b"nan,inf\n-Infinity,NaN\n-0,+1.5\n",
    "ragged.csv": b"1,2,3\n4,5\n",
    "bom_crlf.csv": b"\xef\xbb\xbfa,b\r\n1,2\r\n3,4\r\n",
    "comments_blank.csv": b"# points\n\n1 , 2\n\t3,\t4 \n# end\n",
    "hex_float.csv": b"0x1p3,1\n",
    "out_of_range.csv": b"1e999,1\n",
    "subnormal.csv": b"4.9e-324,1e-400\n",
    "column.csv": b"1\n2\n3\n",
    "row.csv": b"1,2,3,4\n",
    "empty_field.csv": b"1,,3\n",
    "nul_byte.csv": b"1,2\x00\n",
    "semicolon.csv": b"1;2\n3;4\n",
    "no_final_newline.csv": b"1,2\n3,4",
    "nan_payload.csv": b"nan(123),1\n",
}

for role in ("matrix", "vector"):
    for fmt, files in (("npy", NPY), ("csv", CSV)):
        d = os.path.join(HERE, "corpus", "fuzz_read_%s_%s" % (role, fmt))
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
print("corpus written under", os.path.join(HERE, "corpus"))
