"""`tracea export`: tuned kernels as ready-to-use binaries with C and C++ interfaces (docs/export.md).

    from tracea_cli.export import ExportRequest, export
    result = export(ExportRequest(problems=(GemmProblem(2048, 2048, 2048, "fp16"),), archs=("sm_80", "sm_90"),
                                  out=Path("out"), config="default"), settings=Settings.from_env())

Modules: `writer` (the whole export, written atomically), `resolve` (cache winners, shipped defaults, files),
`dispatch` (which shapes a tuned variant serves), `manifest` (the data, its JSON schema and validation),
`c_header` / `cpp_header` / `example` (the generated text), `elf` (function symbols of a cubin), `render` (terminal).
"""

from tracea_cli.export.writer import ExportRequest, ExportResult, export

__all__ = ["ExportRequest", "ExportResult", "export"]
