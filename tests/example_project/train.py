"""A user's own training script, as envkit finds it: no envkit import, its own flags, one small dependency.

Fits a line to generated points on whatever device torch sees, prints a table of the epochs, then its test line
as PyTorch's MNIST example prints it (envkit reads metrics from such a line through the experiment's ``metrics``).
"""

import argparse

import torch
from tabulate import tabulate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 256, device=device).unsqueeze(1)
    y = 3 * x + 0.5 + 0.01 * torch.randn_like(x)
    model = torch.nn.Linear(1, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    rows = []
    for epoch in range(1, args.epochs + 1):
        for _ in range(50):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        rows.append((epoch, f"{loss.item():.5f}"))
    print(tabulate(rows, headers=("epoch", "loss")))
    with torch.no_grad():
        test_loss = torch.nn.functional.mse_loss(model(x), y).item()
        correct = int(((model(x) - y).abs() < 0.02).sum().item())
    print(
        f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(x)} ({100.0 * correct / len(x):.0f}%)\n"
    )
    print(f"device={device} weight={model.weight.item():.3f} bias={model.bias.item():.3f}")


if __name__ == "__main__":
    main()
