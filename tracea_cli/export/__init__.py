"""`tracea export`: tuned kernels as ready-to-use binaries with C and C++ interfaces (docs/export.md).

    from tracea_cli.export import ExportRequest, export
    problem = get_op("gemm").problem(m=2048, dtype="fp16")
    result = export(ExportRequest(problems=(problem,), archs=("sm_80", "sm_90"), out=Path("out"), config="default"),
                    settings=Settings.from_env())

Modules: `writer` (the whole export, written atomically), `resolve` (cache winners, shipped defaults, files),
`dispatch` (which shapes a tuned variant serves), `manifest` (the data, its JSON schema and validation), `c_header`
(the generated C/C++ text over templates/ and the op's ABI), `defaults` (the shipped defaults' reader), `elf`
(function symbols of a cubin), `render` (terminal). What is op-specific (the argument struct, the C++ call, the
example program) comes from the op's `export` ABI (ops/base.ExportAbi).
"""

from tracea_cli.export.writer import ExportRequest, ExportResult, export

__all__ = ["ExportRequest", "ExportResult", "export"]
