#!/usr/bin/env python3
"""Writes the seed corpus of the reader fuzzers (tests/fuzz/corpus/<fuzzer>/), valid and invalid
files alike. Deterministic; rerun after editing, then commit the files. No numpy needed."""
import gzip
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
    code = {"<f8": "<d", "<f4": "<f", ">f8": ">d", ">f4": ">f", "<i4": "<i", "|u1": "<B",
            "<i8": "<q"}.get(descr, "<d")
    if code in ("<i", "<B", "<q"):
        values = [int(v) if code == "<q" else int(v) % 200 for v in values]
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



# ---- IDX (MNIST) and gzip: fuzz_read_matrix_idx (input named .idx) ---------------------------

def gz(data, level=6):
    # Deterministic: mtime 0, no file name.
    return gzip.compress(data, compresslevel=level, mtime=0)


def idx(code, dims, values=None, extra=b"", cut=0, ndim=None):
    fmt = {0x08: ">B", 0x09: ">b", 0x0B: ">h", 0x0C: ">i", 0x0D: ">f", 0x0E: ">d"}
    out = b"\0\0" + bytes([code, len(dims) if ndim is None else ndim])
    out += b"".join(struct.pack(">I", d) for d in dims)
    count = 1
    for d in dims:
        count *= d
    if values is None:
        values = [(7 * i) % 100 for i in range(count)]
    out += b"".join(struct.pack(fmt.get(code, ">B"), v) for v in values) + extra
    return out[:len(out) - cut] if cut else out


images = idx(0x08, (3, 4, 4))
IDX = {
    "ubyte_images_3x4x4.idx": images,
    "ubyte_images_3x4x4.gz": gz(images),
    "ubyte_labels_6.idx": idx(0x08, (6,), [3, 0, 9, 1, 1, 7]),
    "byte_2x3.idx": idx(0x09, (2, 3), [-128, -1, 0, 1, 2, 127]),
    "int16_2x2.idx": idx(0x0B, (2, 2), [-32768, -1, 300, 32767]),
    "int32_3x1.idx": idx(0x0C, (3, 1), [-2147483648, 0, 2147483647]),
    "float32_2x2.idx": idx(0x0D, (2, 2), [0.5, -1.25, float("nan"), float("inf")]),
    "float64_1x2x2.idx": idx(0x0E, (1, 2, 2), [0.1, -0.0, 1e300, 5e-324]),
    "float64_2x3.gz": gz(idx(0x0E, (2, 3))),
    "rank4.idx": idx(0x08, (1, 2, 1, 2)),
    "empty_0x28x28.idx": idx(0x08, (0, 28, 28)),
    "zero_huge.idx": idx(0x08, (0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)),
    "two_members.gz": gz(images[:20]) + gz(images[20:]),
    "stored_block.gz": gz(images, level=0),
    "npy_inside.gz": gz(npy(shape=(2, 2))),
    "csv_inside.gz": gz(b"1,2\n3,4\n"),
    "empty_inside.gz": gz(b""),
    "nested.gz": gz(gz(images)),
    # malformed IDX
    "short_header.idx": b"\0\0\x08",
    "dims_cut.idx": idx(0x08, (3, 4, 4))[:9],
    "bad_type.idx": idx(0x07, (2,), [1, 2]),
    "zero_dims.idx": b"\0\0\x08\0abc",
    "payload_short.idx": idx(0x0C, (2, 3), cut=3),
    "payload_long.idx": idx(0x0C, (2, 3), extra=b"xyz"),
    "lying_dims.idx": idx(0x08, (60000, 28, 28), values=[1] * 16),
    "overflow_dims.idx": idx(0x0E, (0xFFFFFFFF,) * 4, values=[1.0]),
    # malformed gzip
    "truncated.gz": gz(images)[:-10],
    "magic_only.gz": b"\x1f\x8b",
    "bad_crc.gz": (lambda g: g[:-8] + bytes([g[-8] ^ 0x55]) + g[-7:])(gz(images)),
    "bad_block.gz": (lambda g: g[:10] + b"\xff" + g[11:])(gz(images)),
    "trailing_garbage.gz": gz(images) + b"junk",
    "trailing_zeros.gz": gz(images) + b"\0" * 8,
    # a small gzip "bomb": 64 KiB of zeros (the fuzzer grows it within -max_len)
    "zeros_64k.gz": gz(b"\0\0\x08\x01\0\x00\xff\xf8" + b"\0" * 65528, level=9),
}

# ---- labels: fuzz_read_labels (input named .csv; any format by content) -----------------------
LABELS = {
    "idx1_ubyte": idx(0x08, (10,), [5, 0, 4, 1, 9, 2, 1, 3, 1, 4]),
    "idx1_ubyte.gz": gz(idx(0x08, (10,), [5, 0, 4, 1, 9, 2, 1, 3, 1, 4])),
    "idx_int32_big": idx(0x0C, (2,), [-2147483648, 2147483647]),
    "idx_float_frac": idx(0x0D, (2, 1), [1.0, 2.5]),
    "idx_images": idx(0x08, (2, 2, 2)),
    "npy_i8.npy": npy("<i8", shape=(3,), values=[1, 2, 3]),
    "npy_u1.npy": npy("|u1", shape=(4, 1), values=[0, 1, 255, 7]),
    "npy_i4_row.npy": npy("<i4", shape=(1, 3), values=[-1, 0, 1]),
    "npy_f8_frac.npy": npy(shape=(2,), values=[1.0, 2.5]),
    "npy_f8_nan.npy": npy(shape=(2,), values=[1.0, float("nan")]),
    "npy_f8_big.npy": npy(shape=(1,), values=[3e9]),
    "npy_f8_matrix.npy": npy(shape=(2, 3), values=[0.5, 1, 0, 1.5, 2, 1]),
    "csv_column": b"label\n0\n1\n2\n",
    "csv_row": b"3,1,4,1,5\n",
    "csv_features_and_label": b"x,y,label\n0.5,1,0\n2,3,1\n4.5,5,2\n",
    "csv_bad_label_column": b"1,2,0.5\n3,4,nan\n",
    "csv_out_of_range": b"2147483648\n-2147483649\n",
    "csv_single_column_matrix": b"1\n2\n",
    "empty": b"",
}

for name, files in (("fuzz_read_matrix_idx", IDX), ("fuzz_read_labels", LABELS)):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    for fname, data in files.items():
        assert len(data) <= 4096 or fname == "zeros_64k.gz", fname  # keep libFuzzer's -max_len
        with open(os.path.join(d, fname), "wb") as f:
            f.write(data)

for role in ("matrix", "vector"):
    for fmt, files in (("npy", NPY), ("csv", CSV)):
        d = os.path.join(HERE, "corpus", "fuzz_read_%s_%s" % (role, fmt))
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
print("corpus written under", os.path.join(HERE, "corpus"))
