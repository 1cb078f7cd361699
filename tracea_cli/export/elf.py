"""Reading a cubin's ELF symbol table: which kernels (function symbols) a binary really holds.

A cubin is a little-endian ELF64 file. Kernel entry points are `STT_FUNC` symbols; `extern "C"` kernels keep their
source names. Only what the exporter and its tests need: names of function symbols, nothing about relocation.
"""

from __future__ import annotations

import struct

_SHT_SYMTAB = 2
_STT_FUNC = 2


def function_symbols(image: bytes) -> frozenset[str]:
    """Names of the function symbols in an ELF64 little-endian image (a cubin). Raises ValueError for other data."""
    if image[:4] != b"\x7fELF":
        raise ValueError("not an ELF file")
    if image[4] != 2 or image[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    (shoff,) = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
    if shoff == 0 or shentsize < 64 or shoff + shnum * shentsize > len(image):
        raise ValueError("the ELF section table is missing or truncated")
    sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names: set[str] = set()
    for _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if sh_type != _SHT_SYMTAB or entsize < 24 or link >= shnum:
            continue
        str_offset, str_size = sections[link][4], sections[link][5]
        strtab = image[str_offset : str_offset + str_size]
        for at in range(offset, offset + size - entsize + 1, entsize):
            st_name, st_info = struct.unpack_from("<IB", image, at)
            if st_info & 0xF == _STT_FUNC and st_name < len(strtab):
                end = strtab.index(b"\0", st_name)
                names.add(strtab[st_name:end].decode(errors="replace"))
    return frozenset(names)
