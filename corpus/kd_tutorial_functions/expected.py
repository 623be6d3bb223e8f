import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
device = accelerator.device

torch.manual_seed(0)
train_set = TensorDataset(torch.randn(192, 12), torch.randint(0, 4, (192,)))
test_set = TensorDataset(torch.randn(64, 12), torch.randint(0, 4, (64,)))
train_loader = DataLoader(train_set, batch_size=16, shuffle=True)
test_loader = DataLoader(test_set, batch_size=16, shuffle=False)


class DeepNN(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, num_classes))

    def forward(self, x):
        return self.net(x)


class LightNN(nn.Module):
    def __init__(self, num_classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, num_classes))

    def forward(self, x):
        return self.net(x)


def train(model, train_loader, epochs, learning_rate, accelerator):
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=learning_rate)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    model.train()
    for epoch in range(epochs):
        running_loss = 0.0
        for inputs, labels in train_loader:
            optimizer.zero_grad()
            outputs = model(inputs)
            loss = criterion(outputs, labels)
            accelerator.backward(loss)
            optimizer.step()
            running_loss += loss.item()
        running_loss = accelerator.reduce(torch.tensor(running_loss, dtype=torch.float64, device=accelerator.device), "mean").item()
        accelerator.print(f"Epoch {epoch + 1}/{epochs}, Loss: {running_loss / len(train_loader)}")


def test(model, test_loader, device):
    model.to(device)
    model.eval()
    correct = 0
    total = 0
    with torch.no_grad():
        for inputs, labels in test_loader:
            inputs, labels = inputs.to(device), labels.to(device)
            outputs = model(inputs)
            _, predicted = torch.max(outputs.data, 1)
            total += labels.size(0)
            correct += (predicted == labels).sum().item()
    accuracy = 100 * correct / total
    accelerator.print(f"Test Accuracy: {accuracy:.2f}%")
    return accuracy


def train_knowledge_distillation(teacher, student, train_loader, epochs, learning_rate, T, soft_target_loss_weight, ce_loss_weight, accelerator):
    ce_loss = nn.CrossEntropyLoss()
    optimizer = optim.Adam(student.parameters(), lr=learning_rate)
    student, optimizer, train_loader = accelerator.prepare(
        student, optimizer, train_loader
    )
    teacher.eval()
    student.train()
    for epoch in range(epochs):
        running_loss = 0.0
        for inputs, labels in train_loader:
            optimizer.zero_grad()
            with torch.no_grad():
                teacher_logits = teacher(inputs)
            student_logits = student(inputs)
            soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
            soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)
            soft_targets_loss = torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] * (T**2)
            label_loss = ce_loss(student_logits, labels)
            loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss
            accelerator.backward(loss)
            optimizer.step()
            running_loss += loss.item()
        running_loss = accelerator.reduce(torch.tensor(running_loss, dtype=torch.float64, device=accelerator.device), "mean").item()
        accelerator.print(f"Epoch {epoch + 1}/{epochs}, Loss: {running_loss / len(train_loader)}")


torch.manual_seed(42)
nn_deep = DeepNN(num_classes=4)
train(nn_deep, train_loader, epochs=2, learning_rate=0.001, accelerator=accelerator)
test_accuracy_deep = test(nn_deep, test_loader, device)

torch.manual_seed(42)
nn_light = LightNN(num_classes=4).to(device)
torch.manual_seed(42)
new_nn_light = LightNN(num_classes=4)
train(nn_light, train_loader, epochs=2, learning_rate=0.001, accelerator=accelerator)
test_accuracy_light_ce = test(nn_light, test_loader, device)

train_knowledge_distillation(teacher=nn_deep, student=new_nn_light, train_loader=train_loader, epochs=2, learning_rate=0.001, T=2, soft_target_loss_weight=0.25, ce_loss_weight=0.75, accelerator=accelerator)
test_accuracy_light_ce_and_kd = test(new_nn_light, test_loader, device)
accelerator.print(f"Teacher accuracy: {test_accuracy_deep:.2f}%")
accelerator.print(f"Student accuracy without teacher: {test_accuracy_light_ce:.2f}%")
accelerator.print(f"Student accuracy with CE + KD: {test_accuracy_light_ce_and_kd:.2f}%")
accelerator.end_training()
