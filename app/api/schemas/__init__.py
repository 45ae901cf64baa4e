"""Request and response schemas of the HTTP API. Schemas are not tables: `GpuCreate`,
`GpuRead` and `GpuPatch` each say what one side of the wire holds."""
