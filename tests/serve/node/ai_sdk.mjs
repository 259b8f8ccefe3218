// The Vercel AI SDK against foliko: node ai_sdk.mjs SCENARIO API MODEL [ARGS...]
// API is "responses" (openai(MODEL), the default of @ai-sdk/openai) or "chat" (openai.chat(MODEL)).
import { createOpenAI } from "@ai-sdk/openai";
import { generateObject, generateText, isStepCount, streamText, tool } from "ai";
import { z } from "zod";

import { apiKey, baseURL, loggingFetch, main } from "./foliko.mjs";

const openai = createOpenAI({ baseURL, apiKey, fetch: loggingFetch });

function modelFor(api, id) {
  if (api === "responses") return openai(id);
  if (api === "chat") return openai.chat(id);
  throw new Error(`no API ${api}: responses or chat`);
}

const numbers = z.object({ a: z.number(), b: z.number() });
const tools = {
  add: tool({
    description: "Add two numbers.",
    inputSchema: numbers,
    execute: async ({ a, b }) => ({ sum: a + b }),
  }),
  multiply: tool({
    description: "Multiply two numbers.",
    inputSchema: numbers,
    execute: async ({ a, b }) => ({ product: a * b }),
  }),
};

const stepsOf = (steps) =>
  steps.map((step) => ({
    finishReason: step.finishReason,
    text: step.text,
    toolCalls: step.toolCalls.map((call) => ({ toolName: call.toolName, input: call.input })),
    toolResults: step.toolResults.map((r) => ({ toolName: r.toolName, output: r.output })),
    responseId: step.providerMetadata?.openai?.responseId ?? step.response?.id ?? null,
  }));

const stopWhen = isStepCount(5);
const maxRetries = 0;

await main({
  async "generate-tools"(api, model, prompt) {
    const result = await generateText({
      model: modelFor(api, model),
      tools,
      stopWhen,
      maxRetries,
      prompt,
    });
    return { text: result.text, steps: stepsOf(result.steps) };
  },

  async "stream-tools"(api, model, prompt) {
    let failure = null;
    const result = streamText({
      model: modelFor(api, model),
      tools,
      stopWhen,
      maxRetries,
      prompt,
      onError: ({ error }) => {
        failure = error;
      },
    });
    const parts = [];
    let deltas = "";
    for await (const part of result.fullStream) {
      parts.push(part.type);
      if (part.type === "text-delta") deltas += part.text;
      if (part.type === "error") failure = part.error;
    }
    if (failure) throw failure;
    return { text: await result.text, deltas, parts, steps: stepsOf(await result.steps) };
  },

  async "generate-object"(api, model, prompt) {
    const result = await generateObject({
      model: modelFor(api, model),
      schema: z.object({ city: z.string(), population: z.number().int() }),
      maxRetries,
      prompt,
    });
    return {
      object: result.object,
      finishReason: result.finishReason,
      responseId: result.providerMetadata?.openai?.responseId ?? result.response?.id ?? null,
    };
  },
});
