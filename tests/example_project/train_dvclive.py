"""A user's script as DVC's tutorials write one: top-level code, no main guard, a name init does not know, and
dvclive logging each epoch's loss (its metrics land in dvclive/metrics.json)."""

import torch
from dvclive import Live

torch.manual_seed(0)
x = torch.linspace(-1, 1, 128).unsqueeze(1)
y = 2 * x - 1
model = torch.nn.Linear(1, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

with Live() as live:
    for _ in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        live.log_metric("loss", loss.item())
        live.next_step()
print(f"loss={loss.item():.4f}")
