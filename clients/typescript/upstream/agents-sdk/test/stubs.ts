import { z } from 'zod';
import { Agent } from '../src/agent';
import { Model, ModelProvider, ModelResponse } from '../src/model';
import { ScriptedModel, assistantMessage, modelResponse } from '../src/testing';
import { tool } from '../src/tool';
import type { Computer } from '../src/computer';
import type { Environment } from '../src/computer';
import type { Shell, ShellAction, ShellResult } from '../src/shell';
import type {
  Editor,
  ApplyPatchOperation,
  ApplyPatchResult,
  EditorInvocationContext,
} from '../src/editor';
import * as protocol from '../src/types/protocol';
import { Usage } from '../src/usage';
import { Span, Trace, TracingExporter } from '../src';

export const TEST_MODEL_MESSAGE: protocol.AssistantMessageItem =
  assistantMessage('Hello World', { id: '123' });

export function fakeModelMessage(text: string): protocol.AssistantMessageItem {
  return assistantMessage(text, { id: TEST_MODEL_MESSAGE.id });
}

export function fakeModelRefusal(
  refusal: string,
): protocol.AssistantMessageItem {
  return {
    ...TEST_MODEL_MESSAGE,
    content: [
      {
        type: 'refusal' as const,
        refusal,
      },
    ],
  };
}

export function fakeModelMessageWithRefusal(
  text: string,
  refusal: string,
): protocol.AssistantMessageItem {
  return {
    ...TEST_MODEL_MESSAGE,
    content: [
      {
        type: 'output_text' as const,
        text,
        providerData: {
          annotations: [],
        },
      },
      {
        type: 'refusal' as const,
        refusal,
      },
    ],
  };
}

export const TEST_MODEL_FUNCTION_CALL: protocol.FunctionCallItem = {
  id: '123',
  type: 'function_call' as const,
  name: 'test',
  callId: '123',
  status: 'completed',
  arguments: '{"test": "test"}',
};

export const TEST_MODEL_RESPONSE_WITH_FUNCTION: ModelResponse = {
  output: [{ ...TEST_MODEL_FUNCTION_CALL }, { ...TEST_MODEL_MESSAGE }],
  usage: new Usage(),
};

export const TEST_MODEL_RESPONSE_BASIC: ModelResponse = {
  output: [{ ...TEST_MODEL_MESSAGE }],
  usage: new Usage(),
};

export const TEST_AGENT = new Agent({
  name: 'TestAgent',
  instructions: 'Test instructions',
  handoffDescription: 'Test handoff description',
  handoffs: [],
  model: 'gpt-4o',
  modelSettings: {
    temperature: 0.5,
    maxTokens: 100,
  },
});

export const TEST_TOOL = tool({
  name: 'test',
  description: 'Test tool',
  parameters: z.object({
    test: z.string(),
  }),
  execute: async (_input: any) => {
    return 'Hello World';
  },
});

/**
 * Minimal fake computer implementation for tests.
 */
export class FakeComputer implements Computer {
  environment: Environment = 'mac';
  dimensions: [number, number] = [1, 1];

  async screenshot(): Promise<string> {
    return 'img';
  }
  async click(_x: number, _y: number, _button: any): Promise<void> {}
  async doubleClick(_x: number, _y: number): Promise<void> {}
  async drag(_path: [number, number][]): Promise<void> {}
  async keypress(_keys: string[]): Promise<void> {}
  async move(_x: number, _y: number): Promise<void> {}
  async scroll(
    _x: number,
    _y: number,
    _scrollX: number,
    _scrollY: number,
  ): Promise<void> {}
  async type(_text: string): Promise<void> {}
  async wait(): Promise<void> {}
}

export class ScriptedModelProvider implements ModelProvider {
  async getModel(_name: string): Promise<Model> {
    return new ScriptedModel([modelResponse(TEST_MODEL_RESPONSE_BASIC)]);
  }
}

export class FakeTracingExporter implements TracingExporter {
  export(_items: (Trace | Span<any>)[], _signal?: AbortSignal): Promise<void> {
    return Promise.resolve();
  }
}

export class FakeShell implements Shell {
  public readonly calls: ShellAction[] = [];
  public result: ShellResult = {
    output: [
      {
        stdout: 'shell result',
        stderr: '',
        outcome: { type: 'exit', exitCode: 0 },
      },
    ],
  };
  public error: Error | null = null;

  async run(action: ShellAction): Promise<ShellResult> {
    this.calls.push(action);
    if (this.error) {
      throw this.error;
    }
    return this.result;
  }
}

export class FakeEditor implements Editor {
  public readonly operations: ApplyPatchOperation[] = [];
  public readonly contexts: (EditorInvocationContext | undefined)[] = [];
  public result: ApplyPatchResult | void = { status: 'completed' };
  public errors: Partial<Record<ApplyPatchOperation['type'], Error>> = {};

  async createFile(
    operation: Extract<ApplyPatchOperation, { type: 'create_file' }>,
    context?: EditorInvocationContext,
  ): Promise<ApplyPatchResult | void> {
    return this.handle(operation, context);
  }

  async updateFile(
    operation: Extract<ApplyPatchOperation, { type: 'update_file' }>,
    context?: EditorInvocationContext,
  ): Promise<ApplyPatchResult | void> {
    return this.handle(operation, context);
  }

  async deleteFile(
    operation: Extract<ApplyPatchOperation, { type: 'delete_file' }>,
    context?: EditorInvocationContext,
  ): Promise<ApplyPatchResult | void> {
    return this.handle(operation, context);
  }

  private async handle(
    operation: ApplyPatchOperation,
    context?: EditorInvocationContext,
  ): Promise<ApplyPatchResult | void> {
    this.operations.push(operation);
    this.contexts.push(context);
    const error = this.errors[operation.type];
    if (error) {
      throw error;
    }
    return this.result;
  }
}
