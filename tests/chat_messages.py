"""The one-message chat the provider tests send (unit: request bodies; contract: scripted providers)."""


HI = [{"role": "user", "content": "hi"}]
