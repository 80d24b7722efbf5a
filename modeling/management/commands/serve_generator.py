"""Serve the local generator as an OpenAI-compatible completion endpoint (no GPU, no download)."""

from django.core.management.base import BaseCommand

from modeling.generator import LocalGenerator
from modeling.generator_server import make_server


class Command(BaseCommand):
    help = (
        "Serve the offline SmolLM2-135M (or --model-dir) at http://HOST:PORT/v1 with the OpenAI "
        "completions API, for the demo and the tests. Point Stepwise at it with "
        "STEPWISE_GENERATOR_URL. In production serve a real model with vLLM instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8001, help="0 picks a free port.")
        parser.add_argument("--model-dir", help="A causal LM folder (default: SmolLM2-135M).")

    def handle(self, *args, host, port, model_dir, **options):
        generator = LocalGenerator(model_dir)
        server = make_server(generator, host, port)
        bound_port = server.server_address[1]
        # Tests read this line for the port; keep its shape.
        self.stdout.write(f"Serving {generator.name} on http://{host}:{bound_port}/v1")
        self.stdout.flush()
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
