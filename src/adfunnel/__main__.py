from adfunnel.cli import app

app()
