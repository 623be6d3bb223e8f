"""REINFORCE on a cart-pole, with no DataLoader: the policy keeps its episode in attribute lists.

Imitates pytorch/examples reinforcement_learning/reinforce.py line for line: module-level argparse, environment,
seeding, policy and optimizer; `select_action()` appends to `policy.saved_log_probs`, the episode loop appends to
`policy.rewards`, `finish_episode()` computes the returns, steps the optimizer and clears both lists with
`del policy.rewards[:]`; the run stops once the running reward passes the environment's threshold. The environment is
a small pure-Python cart-pole with gym's API (gym is not a dependency of the corpus).
"""
import argparse
import math
import random
from collections import deque
from itertools import count
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical
from accelify.runtime import Accelerator


accelerator = Accelerator(cpu=True)


class CartPole:
    """gym's CartPole dynamics: reset(seed=...) -> (state, info); step(a) -> (state, reward, terminated, truncated, info)."""

    spec = SimpleNamespace(reward_threshold=60.0, max_episode_steps=200)

    def __init__(self):
        self.rng = random.Random()
        self.state, self.steps = None, 0

    def reset(self, seed=None):
        if seed is not None:
            self.rng.seed(seed)
        self.state = [self.rng.uniform(-0.05, 0.05) for _ in range(4)]
        self.steps = 0
        return list(self.state), {}

    def step(self, action):
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        costheta, sintheta = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot ** 2 * sintheta) / 1.1
        thetaacc = (9.8 * sintheta - costheta * temp) / (0.5 * (4.0 / 3.0 - 0.1 * costheta ** 2 / 1.1))
        xacc = temp - 0.05 * thetaacc * costheta / 1.1
        x, x_dot = x + 0.02 * x_dot, x_dot + 0.02 * xacc
        theta, theta_dot = theta + 0.02 * theta_dot, theta_dot + 0.02 * thetaacc
        self.state = [x, x_dot, theta, theta_dot]
        self.steps += 1
        terminated = abs(x) > 2.4 or abs(theta) > 12 * 2 * math.pi / 360
        truncated = self.steps >= self.spec.max_episode_steps
        return list(self.state), 1.0, terminated, truncated, {}


parser = argparse.ArgumentParser(description="PyTorch REINFORCE example")
parser.add_argument("--gamma", type=float, default=0.99, metavar="G", help="discount factor (default: 0.99)")
parser.add_argument("--seed", type=int, default=543, metavar="N", help="random seed (default: 543)")
parser.add_argument("--log-interval", type=int, default=10, metavar="N", help="interval between training status logs (default: 10)")
args = parser.parse_args()


env = CartPole()
env.reset(seed=args.seed + accelerator.process_index)
torch.manual_seed(args.seed + accelerator.process_index)


class Policy(nn.Module):
    def __init__(self):
        super(Policy, self).__init__()
        self.affine1 = nn.Linear(4, 128)
        self.dropout = nn.Dropout(p=0.6)
        self.affine2 = nn.Linear(128, 2)

        self.saved_log_probs = []
        self.rewards = []

    def forward(self, x):
        x = self.affine1(x)
        x = self.dropout(x)
        x = F.relu(x)
        action_scores = self.affine2(x)
        return F.softmax(action_scores, dim=1)


policy = Policy()
optimizer = optim.Adam(policy.parameters(), lr=1e-2)
policy, optimizer = accelerator.prepare(policy, optimizer)
eps = torch.finfo(torch.float32).eps


def select_action(state):
    state = torch.tensor(state, dtype=torch.float32).unsqueeze(0)
    probs = policy(state)
    m = Categorical(probs)
    action = m.sample()
    policy.saved_log_probs.append(m.log_prob(action))
    return action.item()


def finish_episode():
    R = 0
    policy_loss = []
    returns = deque()
    for r in policy.rewards[::-1]:
        R = r + args.gamma * R
        returns.appendleft(R)
    returns = torch.tensor(returns)
    returns = (returns - returns.mean()) / (returns.std() + eps)
    for log_prob, R in zip(policy.saved_log_probs, returns):
        policy_loss.append(-log_prob * R)
    optimizer.zero_grad()
    policy_loss = torch.cat(policy_loss).sum()
    accelerator.backward(policy_loss)
    optimizer.step()
    del policy.rewards[:]
    del policy.saved_log_probs[:]


def main():
    running_reward = 10
    for i_episode in count(1):
        state, _ = env.reset()
        ep_reward = 0
        for t in range(1, 10000):  # Don't infinite loop while learning
            action = select_action(state)
            state, reward, terminated, truncated, _ = env.step(action)
            policy.rewards.append(reward)
            ep_reward += reward
            if terminated or truncated:
                break

        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        finish_episode()
        if i_episode % args.log_interval == 0:
            accelerator.print("Episode {}\tLast reward: {:.2f}\tAverage reward: {:.2f}".format(
                  i_episode, ep_reward, running_reward))
        if running_reward > env.spec.reward_threshold:
            accelerator.print("Solved! Running reward is now {} and "
                  "the last episode runs to {} time steps!".format(running_reward, t))
            accelerator.set_trigger()
        if accelerator.check_trigger():
            break


if __name__ == "__main__":
    main()
    accelerator.end_training()
